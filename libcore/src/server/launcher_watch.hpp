// A served rank's watch over the process that launched it (mpiexec, its node daemon, srun's
// step daemon). Once MPI is finalised, nothing of MPI ends a rank whose launcher is killed; a
// launcher gone means the job is over (scancel, mpiexec killed), so the rank ends too.
#pragma once

#include <sys/types.h>

#include <functional>
#include <thread>

namespace ddstage::detail {

/// Calls `on_gone` (once, on a thread of its own) when this process's parent is no longer the
/// one it had when the watch started: the parent ended and the process was handed to another.
class LauncherWatch {
 public:
  explicit LauncherWatch(std::function<void(pid_t launcher)> on_gone);
  LauncherWatch(const LauncherWatch&) = delete;
  LauncherWatch& operator=(const LauncherWatch&) = delete;

 private:
  pid_t m_launcher;
  std::function<void(pid_t)> m_on_gone;
  std::jthread m_thread;  // last: starts once everything it reads is set
};

}  // namespace ddstage::detail
