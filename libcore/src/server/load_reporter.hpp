// Rank 0's progress report of a running load, on a thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "control/control_channel.hpp"

namespace ddstage::detail {

/// A running load's account, sent as interim messages {progress, total, samples} before the
/// reply: by rank 0 to the client that asked for it (the slowest rank's fraction done, scaled
/// to the dataset's bytes, and logged at info level every 10%), and by every other rank to rank
/// 0 (its own regions' bytes). Started before the index is opened: checking a large tree's
/// freshness can outlast the receiver's timeout, and the keepalives (totals 0 until describe())
/// tell it the sender is at work.
class LoadReporter {
 public:
  /// keepalive: the longest gap between messages; log: rank 0's deciles in the log.
  explicit LoadReporter(ControlConnection* client,
                        std::chrono::milliseconds keepalive = std::chrono::seconds(5),
                        bool log = false)
      : m_client(client),
        m_keepalive(keepalive),
        m_log(log),
        m_thread([this](std::stop_token stop) { run(stop); }) {}
  LoadReporter(const LoadReporter&) = delete;
  LoadReporter& operator=(const LoadReporter&) = delete;

  /// Once the index is open: what the load is of.
  void describe(std::string name, uint64_t dataset_bytes, uint64_t samples) {
    std::lock_guard lock(m_mutex);
    m_name = std::move(name);
    m_bytes = dataset_bytes;
    m_samples = samples;
  }

  /// From the loading streams: atomics only, the socket is the reporter thread's.
  void update(uint64_t done, uint64_t total) noexcept {
    m_fraction = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  }

 private:
  static constexpr auto interval = std::chrono::milliseconds(250);

  /// Reports at once (the client sees the load start), then every interval, and once more
  /// when stopped (the log reaches 100% even for a load shorter than an interval).
  void run(std::stop_token stop);
  void send(double fraction);

  std::mutex m_mutex;  ///< guards the three below
  std::string m_name;
  uint64_t m_bytes = 0;
  uint64_t m_samples = 0;
  ControlConnection* m_client;
  /// Messages go even without news, so that the receiver's per-message timeout measures a
  /// silent sender, not a long load.
  std::chrono::milliseconds m_keepalive;
  bool m_log;
  std::atomic<double> m_fraction{0};
  std::jthread m_thread;  // last: starts once everything it reads is set
};

}  // namespace ddstage::detail
