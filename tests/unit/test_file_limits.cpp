#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>

#include "ddstage/tool/file_descriptor.hpp"

TEST_CASE("serve's open-file limit: the soft limit is raised to the hard one", "[limits]") {
  rlimit start{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &start) == 0);
  // In a child: the test process keeps its own limits.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rlimit low = start;
    low.rlim_cur = 64;
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0 || ddstage::open_file_limit() != 64) ::_exit(2);
    const auto raised = ddstage::raise_open_file_limit();
    rlimit now{};
    ::getrlimit(RLIMIT_NOFILE, &now);
    const bool ok = now.rlim_cur == start.rlim_max &&
                    (start.rlim_max == RLIM_INFINITY || raised == start.rlim_max);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("running out of descriptors or memory is a local error, not a peer's", "[limits]") {
  for (int err : {EMFILE, ENFILE, ENOMEM, ENOBUFS}) CHECK(ddstage::local_resource_error(err));
  for (int err : {ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, ECONNRESET, EPIPE})
    CHECK_FALSE(ddstage::local_resource_error(err));
}
