#include "signal_watch.hpp"

#include <pthread.h>

#include <cerrno>

#include "ddstage/error.hpp"

namespace ddstage::detail {

SignalWatch::SignalWatch(std::function<void(int)> on_signal) : m_on_signal(std::move(on_signal)) {
  sigemptyset(&m_set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&m_set, sig);
  if (int rc = ::pthread_sigmask(SIG_BLOCK, &m_set, &m_old); rc != 0)
    throw IoError("pthread_sigmask", rc);
  m_thread = std::jthread([this](std::stop_token stop) { run(stop); });
}

SignalWatch::~SignalWatch() {
  m_thread.request_stop();
  m_thread.join();
  ::pthread_sigmask(SIG_SETMASK, &m_old, nullptr);
}

void SignalWatch::run(const std::stop_token& stop) {
  // A bounded wait, so the thread sees its stop token without being signalled itself.
  const timespec poll{0, 100'000'000};
  while (!stop.stop_requested()) {
    const int sig = ::sigtimedwait(&m_set, nullptr, &poll);
    if (sig > 0) m_on_signal(sig);
  }
}

}  // namespace ddstage::detail
