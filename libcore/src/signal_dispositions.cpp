#include "signal_dispositions.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

namespace ddstage::detail {
namespace {

std::recursive_mutex guarded_sections;

// Linux's SA_RESTORER, which glibc keeps out of its headers: it sets the flag on every
// disposition it installs (its return trampoline) and the kernel reports it, while a signal no
// one ever set lacks it. A default disposition put back thus gains it and means the same.
constexpr int restorer_flag = 0x04000000;

bool same(const struct sigaction& a, const struct sigaction& b) {
  if ((a.sa_flags & ~restorer_flag) != (b.sa_flags & ~restorer_flag)) return false;
  if ((a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != b.sa_sigaction : a.sa_handler != b.sa_handler)
    return false;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&a.sa_mask, sig) != sigismember(&b.sa_mask, sig)) return false;
  }
  return true;
}

}  // namespace

SignalDispositions::SignalDispositions(std::string what)
    : m_lock(guarded_sections), m_what(std::move(what)) {
  for (int sig = 1; sig < NSIG; ++sig) {
    m_readable[sig] = sigaction(sig, nullptr, &m_saved[sig]) == 0;
  }
}

SignalDispositions::~SignalDispositions() {
  std::string changed;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction now {};
    if (!m_readable[sig] || sigaction(sig, nullptr, &now) != 0 || same(now, m_saved[sig])) continue;
    changed += (changed.empty() ? "" : ", ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (sigaction(sig, &m_saved[sig], nullptr) != 0) {
      spdlog::warn("{} changed the handler of signal {} and it could not be put back: {}", m_what,
                   sig, std::strerror(errno));
    }
  }
  // Debug, not info: on Debian every process that loads libfabric would print it, and nothing
  // is left for the user to do.
  if (!changed.empty()) {
    spdlog::debug("{} changed the handlers of signals {}; the process's own were put back", m_what,
                  changed);
  }
}

}  // namespace ddstage::detail
