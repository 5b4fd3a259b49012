// A rank that lives on this host but in a mount namespace of its own, with a private /dev/shm
// (what Slurm's job_container/tmpfs gives each job): its rank lock is invisible from ours.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "rank_lock.hpp"

namespace ddstage::test {

class ShmNamespaceRank {
 public:
  /// Forks a child that unshares its mount namespace, mounts a tmpfs on /dev/shm and holds
  /// `rank`'s lock there until killed. started() is false where unsharing is not allowed.
  ShmNamespaceRank(const std::string& store_id, int rank) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    m_pid = ::fork();
    if (m_pid == 0) {
      ::close(ready[0]);
      char ok = 0;
      if (::unshare(CLONE_NEWNS) == 0 &&
          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
          ::mount("tmpfs", "/dev/shm", "tmpfs", 0, nullptr) == 0) {
        detail::RankLock lock(store_id, rank);
        ok = 1;
        (void)!::write(ready[1], &ok, 1);
        for (;;) ::pause();
      }
      (void)!::write(ready[1], &ok, 1);
      ::_exit(1);
    }
    ::close(ready[1]);
    char ok = 0;
    m_started = m_pid > 0 && ::read(ready[0], &ok, 1) == 1 && ok == 1;
    ::close(ready[0]);
  }
  ShmNamespaceRank(const ShmNamespaceRank&) = delete;
  ShmNamespaceRank& operator=(const ShmNamespaceRank&) = delete;
  ~ShmNamespaceRank() { kill(); }

  bool started() const { return m_started; }
  pid_t pid() const { return m_pid; }

  /// SIGKILL, reaped: the rank is gone, its private /dev/shm with it.
  void kill() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }

 private:
  pid_t m_pid = -1;
  bool m_started = false;
};

}  // namespace ddstage::test
