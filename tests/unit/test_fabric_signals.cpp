// Loading libfabric leaves the process's signal handlers alone. Debian's pulls in libinfinipath,
// whose constructor takes SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM (and exits from
// its SIGTERM handler). A library loads once per process, so the check runs in a fresh one: this
// binary again, running only the hidden case below.
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <optional>
#include <vector>

#include <catch2/catch.hpp>

#include "ddstage/error.hpp"
#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_library.hpp"
#include "fabric/fabric_provider.hpp"
#include "signal_handlers.hpp"

extern char** environ;

using namespace ddstage::detail;
using ddstage::test::Disposition;

namespace {

constexpr const char* fresh_process_case =
    "fresh process: signal handlers kept through loading libfabric and opening an endpoint";

constexpr int kept_signals[] = {SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT};

std::vector<Disposition> dispositions() {
  std::vector<Disposition> out;
  for (int sig : kept_signals) out.push_back(Disposition::of(sig));
  return out;
}

}  // namespace

TEST_CASE("fabric: loading libfabric keeps the process's signal handlers", "[fabric][signals]") {
  try {
    fabric_api();
  } catch (const ddstage::UsageError& e) {
    WARN("skipped: " << e.what());
    return;
  }
  // NoTests: a renamed case would otherwise match nothing and pass.
  const char* argv[] = {"ddstage_unit_tests", fresh_process_case, "--warn", "NoTests", nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, const_cast<char**>(argv),
                      environ) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("the fresh process (its own report is above) ended with wait status " << status);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE(fresh_process_case, "[.]") {
  REQUIRE(dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr);  // loaded below
  setenv("FI_TCP_IFACE", "lo", 1);  // the endpoint below stays on loopback
  // An application's handler, and a signal it ignores; the crash signals have Catch's handlers.
  ddstage::test::install_counting_handler(SIGTERM);
  std::signal(SIGINT, SIG_IGN);
  const auto before = dispositions();

  fabric_api();
  INFO("libinfinipath, which installs handlers, "
       << (dlopen("libinfinipath.so.4", RTLD_NOW | RTLD_NOLOAD) ? "was" : "was not")
       << " loaded with libfabric");
  CHECK(dispositions() == before);
  std::optional<FabricEndpoint> endpoint;
  try {
    endpoint.emplace(*choose_provider("tcp", "lo"));
  } catch (const ddstage::UsageError& e) {
    WARN("no endpoint opened: " << e.what());
  }
  CHECK(dispositions() == before);

  // SIGTERM reaches the application's handler: libinfinipath's would exit the process here.
  const auto handled = ddstage::test::handled;
  std::raise(SIGTERM);
  CHECK(ddstage::test::handled == handled + 1);
}
