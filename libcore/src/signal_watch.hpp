// Termination signals taken by one thread, whatever the others are doing.
#pragma once

#include <signal.h>

#include <functional>
#include <thread>

namespace ddstage::detail {

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every thread it starts
/// afterwards, MPI's included: construct it before MPI_Init) and hands each one that comes to
/// `on_signal` on a thread of its own. No signal handler runs: the callback may take locks,
/// log and remove files. Restores the caller's mask when destroyed.
class SignalWatch {
 public:
  explicit SignalWatch(std::function<void(int)> on_signal);
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch();

 private:
  void run(const std::stop_token& stop);

  sigset_t m_set{};
  sigset_t m_old{};
  std::function<void(int)> m_on_signal;
  std::jthread m_thread;  // last: starts once the mask is set
};

}  // namespace ddstage::detail
