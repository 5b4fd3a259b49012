#include "load_reporter.hpp"

#include <spdlog/spdlog.h>

#include "control/control_messages.hpp"
#include "ddstage/error.hpp"
#include "stoppable_sleep.hpp"

namespace ddstage::detail {

void LoadReporter::run(std::stop_token stop) {
  double sent = -1;
  int logged_decile = 0;
  auto last_send = std::chrono::steady_clock::now();
  for (;;) {
    const double fraction = m_fraction.load();
    const auto now = std::chrono::steady_clock::now();
    if (fraction != sent || now - last_send >= m_keepalive) {
      send(fraction);
      sent = fraction;
      last_send = now;
    }
    for (; m_log && logged_decile < static_cast<int>(fraction * 10); ++logged_decile) {
      std::lock_guard lock(m_mutex);
      spdlog::info("loading '{}': {}% (the slowest rank's share)", m_name,
                   (logged_decile + 1) * 10);
    }
    if (stop.stop_requested()) return;
    sleep_unless_stopped(stop, std::min<std::chrono::milliseconds>(interval, m_keepalive));
  }
}

void LoadReporter::send(double fraction) {
  if (!m_client) return;
  LoadProgress progress;
  {
    std::lock_guard lock(m_mutex);
    progress = {static_cast<uint64_t>(fraction * static_cast<double>(m_bytes)), m_bytes, m_samples};
  }
  try {
    m_client->send(progress_message(progress), std::chrono::seconds(2));
  } catch (const Error& e) {
    // The load goes on for every rank; the client learns the outcome if it comes back to read.
    spdlog::warn("stopped sending load progress to {}: {}", m_client->peer(), e.what());
    m_client = nullptr;
  }
}

}  // namespace ddstage::detail
