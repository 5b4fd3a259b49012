// A non-zero rank's heartbeat to rank 0, and its way of learning that rank 0 is gone.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace ddstage::detail {

/// Sends {op: heartbeat, rank} to rank 0's control socket every heartbeat_interval(peer_timeout)
/// on a thread of its own; when no heartbeat has been answered for peer_timeout, calls
/// `on_lost` (once) with the silence so far, and when rank 0 refuses one (it counts this rank
/// lost, or it is another store now), calls it at once with rank 0's words. Independent of MPI:
/// it works while the main thread is blocked in a collective whose peer is gone.
class Heartbeat {
 public:
  using OnLost = std::function<void(std::chrono::milliseconds silence,
                                    const std::optional<std::string>& refusal)>;

  Heartbeat(std::string control, std::string token, int rank,
            std::chrono::milliseconds peer_timeout, OnLost on_lost);
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run(const std::stop_token& stop);

  std::string m_control;
  std::string m_token;
  int m_rank;
  std::chrono::milliseconds m_timeout;
  OnLost m_on_lost;
  std::jthread m_thread;  // last: starts once everything it reads is set
};

}  // namespace ddstage::detail
