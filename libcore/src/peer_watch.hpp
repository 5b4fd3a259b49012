// Rank 0's watch over the other ranks' heartbeats: a rank that goes silent is a lost rank.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ddstage::detail {

/// How often a rank sends a heartbeat for a given peer_timeout: ten chances before it counts as
/// lost, but not more than two a second.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds peer_timeout);

/// The last time each rank was heard from, and a thread that calls `on_lost` once for each rank
/// other than 0 that has been silent for peer_timeout, and forgets it. Thread-safe.
class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  using OnLost = std::function<void(int rank, std::chrono::milliseconds silence)>;

  /// Records heartbeats from now on; watches only from watch().
  PeerWatch(int ranks, std::chrono::milliseconds peer_timeout, OnLost on_lost);
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// Every rank counts as heard now, and the watch starts: call it once every rank knows where
  /// to send its heartbeats (before the store's other start-up collectives).
  void watch();
  /// Records a heartbeat; false for a rank that is not in the store, or was forgotten (lost
  /// ranks are never taken back: their heartbeats go unanswered, and they end themselves).
  bool heard(int rank);
  /// Stops watching a rank found lost otherwise (a command it did not answer).
  void forget(int rank);
  /// Seconds since each rank was last heard (rank 0, this one: 0).
  std::vector<double> silence_seconds() const;
  /// The ranks not forgotten that are silent for longer than `limit`.
  std::vector<int> silent_for(std::chrono::milliseconds limit) const;

 private:
  void run(const std::stop_token& stop);

  std::chrono::milliseconds m_timeout;
  OnLost m_on_lost;
  mutable std::mutex m_mutex;
  std::vector<Clock::time_point> m_last;
  std::vector<bool> m_forgotten;
  std::jthread m_thread;  // last: stopped first
};

}  // namespace ddstage::detail
