// What the signal-disposition tests compare: sigaction's answer for one signal, read apart from
// libcore's own comparison, and a handler that tells whether it ran.
#pragma once

#include <signal.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace ddstage::test {

/// One signal's disposition as sigaction reports it.
struct Disposition {
  int sig = 0;
  void* handler = nullptr;  // sa_handler or sa_sigaction, whichever SA_SIGINFO says is in use
  int flags = 0;            // less SA_RESTORER, glibc's own (signal_dispositions.cpp)
  std::string mask;         // the blocked signals, "0101...": sigset_t has bits no kernel reports

  static Disposition of(int sig) {
    struct sigaction sa {};
    REQUIRE(sigaction(sig, nullptr, &sa) == 0);
    Disposition d;
    d.sig = sig;
    d.flags = sa.sa_flags & ~0x04000000;
    d.handler = (sa.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(sa.sa_sigaction)
                                           : reinterpret_cast<void*>(sa.sa_handler);
    for (int s = 1; s < NSIG; ++s) d.mask += sigismember(&sa.sa_mask, s) == 1 ? '1' : '0';
    return d;
  }
  bool operator==(const Disposition&) const = default;
};

/// How many times count_signal ran.
inline volatile sig_atomic_t handled = 0;
inline void count_signal(int, siginfo_t*, void*) {
  handled = handled + 1;
}

/// Installs count_signal for sig, as an application would: SA_SIGINFO | SA_RESTART, blocking
/// SIGUSR2 while it runs.
inline void install_counting_handler(int sig) {
  struct sigaction sa {};
  sa.sa_sigaction = count_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR2);
  REQUIRE(sigaction(sig, &sa, nullptr) == 0);
}

/// Puts back, at the end of a test, the handlers of the signals it changes: the tests share a
/// process.
class RestoreAtEnd {
 public:
  explicit RestoreAtEnd(std::initializer_list<int> sigs) {
    for (int sig : sigs) {
      struct sigaction sa {};
      REQUIRE(sigaction(sig, nullptr, &sa) == 0);
      m_saved.emplace_back(sig, sa);
    }
  }
  RestoreAtEnd(const RestoreAtEnd&) = delete;
  RestoreAtEnd& operator=(const RestoreAtEnd&) = delete;
  ~RestoreAtEnd() {
    for (const auto& [sig, sa] : m_saved) sigaction(sig, &sa, nullptr);
  }

 private:
  std::vector<std::pair<int, struct sigaction>> m_saved;
};

}  // namespace ddstage::test

namespace Catch {
template <>
struct StringMaker<ddstage::test::Disposition> {
  static std::string convert(const ddstage::test::Disposition& d) {
    return "signal " + std::to_string(d.sig) + ": handler " +
           std::to_string(reinterpret_cast<std::uintptr_t>(d.handler)) + ", flags " +
           std::to_string(d.flags) + ", mask " + d.mask;
  }
};
}  // namespace Catch
