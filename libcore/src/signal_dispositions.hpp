// The process's signal dispositions, kept from the libraries it loads. Debian's libfabric pulls
// in libinfinipath, whose constructor takes SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM
// and calls exit() from its SIGTERM handler: a reader ended by SIGTERM exited 1, or deadlocked in
// its exit handlers, instead of dying by the signal.
#pragma once

#include <signal.h>

#include <array>
#include <mutex>
#include <string>

namespace ddstage::detail {

/// Saves the disposition (sigaction) of every signal; the destructor puts back each one that
/// changed meanwhile, exactly as it was (an application's or Python's handler, an ignore, the
/// default), and logs which. Wrap every call that may load a library or initialise a provider.
/// Guards are serialised process-wide, since dispositions are, and nest within a thread. A
/// handler another thread installs during a guard without one of its own is undone too.
class SignalDispositions {
 public:
  /// `what` names the guarded call in the log line: "loading libfabric.so.1".
  explicit SignalDispositions(std::string what);
  SignalDispositions(const SignalDispositions&) = delete;
  SignalDispositions& operator=(const SignalDispositions&) = delete;
  ~SignalDispositions();

 private:
  std::unique_lock<std::recursive_mutex> m_lock;
  std::string m_what;
  std::array<struct sigaction, NSIG> m_saved{};
  std::array<bool, NSIG> m_readable{};  // false for the signals glibc keeps to itself
};

}  // namespace ddstage::detail
