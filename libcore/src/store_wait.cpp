#include "ddstage/tool/store_wait.hpp"

#include <algorithm>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "control/control_channel.hpp"
#include "control/control_messages.hpp"
#include "ddstage/error.hpp"
#include "process.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

/// Between looks: a store is up within a few of these after it is, and a waiting job script
/// costs nothing.
constexpr milliseconds poll_interval{150};

std::string seconds_text(milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{}s", d.count() / 1000)
                               : fmt::format("{}ms", d.count());
}

/// The descriptor in DIR, or nullopt while there is none or it cannot be read yet (seen says
/// why). A directory or store.yaml that is not the user's own is refused at once: waiting does
/// not change whose it is.
std::optional<StoreDescriptor> read_descriptor(const fs::path& dir, std::string& seen) {
  const auto path = StoreDescriptor::path_in(dir);
  std::error_code ec;
  seen.clear();
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  try {
    return StoreDescriptor::read(dir);
  } catch (const Error& e) {
    // Removed between the two looks (a serve replacing a stale one): look again.
    if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
    if (e.kind() == ErrorKind::usage) throw;
    seen = e.what();  // damaged or from a newer ddstage: a new serve replaces it
    return std::nullopt;
  }
}

/// True once the store d names answers a status request with its token.
bool answers(const StoreDescriptor& d, milliseconds budget, std::string& seen) {
  try {
    const auto reply =
        detail::control_request(d.control, d.token, detail::status_request(), budget);
    if (!detail::failure_of(reply)) return true;
    seen = fmt::format("store.yaml names control {}, which refuses a status request", d.control);
  } catch (const Error&) {
    seen = fmt::format("store.yaml names control {}, which does not answer", d.control);
  }
  return false;
}

std::string timeout_message(const WaitOptions& o, const std::string& seen) {
  const auto dir = o.dir.string();
  if (seen.empty()) {
    return fmt::format(
        "no store at {} after {}: there is no store.yaml (is `ddstage serve --store {}` running?)",
        dir, seconds_text(o.timeout), dir);
  }
  return fmt::format(
      "no live store at {} after {}: {} (a dead store's leftover? `ddstage stop --store {}` "
      "removes it)",
      dir, seconds_text(o.timeout), seen, dir);
}

}  // namespace

StoreDescriptor wait_for_store(const WaitOptions& o) {
  const auto deadline = Clock::now() + o.timeout;
  std::string seen;
  if (o.pid < 0) throw UsageError(fmt::format("--pid {}: not a process id", o.pid));
  for (;;) {
    if (auto d = read_descriptor(o.dir, seen)) {
      // A last look at the deadline still gets a round trip's time.
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (answers(*d, std::min(std::max(left, milliseconds(100)), o.control_timeout), seen))
        return *d;
    }
    if (o.pid > 0 && !detail::process_alive(o.pid)) {
      throw Error(ErrorKind::runtime,
                  fmt::format("serve (pid {}) exited before the store at {} was ready{}", o.pid,
                              o.dir.string(), seen.empty() ? "" : " (" + seen + ")"));
    }
    const auto now = Clock::now();
    if (now >= deadline) throw Error(ErrorKind::runtime, timeout_message(o, seen));
    std::this_thread::sleep_for(std::min<Clock::duration>(poll_interval, deadline - now));
  }
}

}  // namespace ddstage
