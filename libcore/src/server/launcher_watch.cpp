#include "server/launcher_watch.hpp"

#include <unistd.h>

#include "stoppable_sleep.hpp"

namespace ddstage::detail {

LauncherWatch::LauncherWatch(std::function<void(pid_t launcher)> on_gone)
    : m_launcher(::getppid()),
      m_on_gone(std::move(on_gone)),
      m_thread([this](std::stop_token stop) {
        // Polled: PR_SET_PDEATHSIG fires when the parent's forking thread ends, which a
        // launcher's progress thread may do while the launcher runs on.
        while (sleep_unless_stopped(stop, std::chrono::milliseconds(250))) {
          if (::getppid() != m_launcher) {
            m_on_gone(m_launcher);
            return;
          }
        }
      }) {}

}  // namespace ddstage::detail
