// SignalDispositions in this process, without the libraries it exists for: what a guard puts
// back, what it leaves, and guards nested and on several threads at once.
#include <csignal>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "signal_dispositions.hpp"
#include "signal_handlers.hpp"

using namespace ddstage::detail;
using ddstage::test::Disposition;

namespace {

void ignore_signal(int) {}

}  // namespace

TEST_CASE("signals: a guard puts back every handler changed under it, exactly as it was",
          "[signals]") {
  const ddstage::test::RestoreAtEnd restore{SIGUSR1, SIGHUP, SIGTERM};
  ddstage::test::install_counting_handler(SIGUSR1);
  std::signal(SIGHUP, SIG_IGN);
  const std::vector<Disposition> before{Disposition::of(SIGUSR1), Disposition::of(SIGHUP),
                                        Disposition::of(SIGTERM)};
  {
    const SignalDispositions kept("a test");
    std::signal(SIGUSR1, SIG_DFL);
    std::signal(SIGHUP, ignore_signal);
    ddstage::test::install_counting_handler(SIGTERM);
  }
  CHECK(std::vector{Disposition::of(SIGUSR1), Disposition::of(SIGHUP), Disposition::of(SIGTERM)} ==
        before);
  // The application's handler is in place, not merely a look-alike.
  const auto handled = ddstage::test::handled;
  std::raise(SIGUSR1);
  CHECK(ddstage::test::handled == handled + 1);

  // A change made outside any guard is the process's own, and stays.
  std::signal(SIGHUP, ignore_signal);
  { const SignalDispositions kept("a test"); }
  CHECK(Disposition::of(SIGHUP) != before[1]);
}

TEST_CASE("signals: guards nest within a thread and take turns across threads", "[signals]") {
  const ddstage::test::RestoreAtEnd restore{SIGUSR1, SIGUSR2};
  const Disposition usr1 = Disposition::of(SIGUSR1), usr2 = Disposition::of(SIGUSR2);
  {
    const SignalDispositions outer("outer");
    {
      const SignalDispositions inner("inner");
      std::signal(SIGUSR1, SIG_IGN);
    }
    CHECK(Disposition::of(SIGUSR1) == usr1);
    std::signal(SIGUSR2, SIG_IGN);
  }
  CHECK(Disposition::of(SIGUSR2) == usr2);

  // Unserialised, one thread's guard could save the other's change and later put it back.
  auto churn = [](int sig) {
    for (int i = 0; i < 500; ++i) {
      const SignalDispositions kept("a thread");
      std::signal(sig, i % 2 ? SIG_IGN : ignore_signal);
    }
  };
  std::thread a(churn, SIGUSR1), b(churn, SIGUSR2);
  a.join();
  b.join();
  CHECK(Disposition::of(SIGUSR1) == usr1);
  CHECK(Disposition::of(SIGUSR2) == usr2);
}
