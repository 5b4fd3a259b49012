#include "heartbeat.hpp"

#include <algorithm>

#include "control/control_channel.hpp"
#include "control/control_messages.hpp"
#include "ddstage/error.hpp"
#include "peer_watch.hpp"
#include "stoppable_sleep.hpp"

namespace ddstage::detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Heartbeat::Heartbeat(std::string control, std::string token, int rank, milliseconds peer_timeout,
                     OnLost on_lost)
    : m_control(std::move(control)),
      m_token(std::move(token)),
      m_rank(rank),
      m_timeout(peer_timeout),
      m_on_lost(std::move(on_lost)),
      m_thread([this](std::stop_token stop) { run(stop); }) {}

void Heartbeat::run(const std::stop_token& stop) {
  const auto interval = heartbeat_interval(m_timeout);
  const Message beat = heartbeat_request(m_rank);
  auto answered = Clock::now();
  for (;;) {
    try {
      // A stopped or cut-off rank 0 may accept the connection and never answer: bounded wait.
      const auto reply =
          control_request(m_control, m_token, beat, std::min(m_timeout, 2 * interval));
      if (const auto refused = failure_of(reply)) {
        // Rank 0 runs and does not take this rank back: waiting longer changes nothing.
        if (!stop.stop_requested())
          m_on_lost(std::chrono::duration_cast<milliseconds>(Clock::now() - answered),
                    refused->text);
        return;
      }
      answered = Clock::now();
    } catch (const std::exception&) {
      // Not answered: the silence grows until it reaches peer_timeout.
    }
    const auto silence = Clock::now() - answered;
    if (silence >= m_timeout && !stop.stop_requested()) {
      m_on_lost(std::chrono::duration_cast<milliseconds>(silence), std::nullopt);
      return;
    }
    if (!sleep_unless_stopped(stop, interval)) return;
  }
}

}  // namespace ddstage::detail
