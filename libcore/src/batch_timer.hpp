// Per-batch stage timing for the read profile: the inside of get_batch marks where each stage
// ends; nested code (a fabric registration, a GPU sync) marks through the thread's current
// timer without being passed it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "ddstage/profile.hpp"

namespace ddstage::detail {

class BatchTimer {
 public:
  /// Starts timing when the profile is on; otherwise every call is a branch on one bool.
  BatchTimer() noexcept;
  BatchTimer(const BatchTimer&) = delete;
  BatchTimer& operator=(const BatchTimer&) = delete;
  /// A batch that threw is not counted.
  ~BatchTimer();

  /// The time since the previous mark (or the start) was spent in stage.
  void mark(ProfileStage stage) noexcept {
    if (m_active) mark_now(stage);
  }
  /// Names a path this batch took ("shm", "fabric"); a string literal.
  void path(const char* name) noexcept;
  /// Records the batch; marks its remaining time as `other`.
  void finish(uint64_t rows, uint64_t bytes) noexcept;

  using Clock = std::chrono::steady_clock;

 private:
  void mark_now(ProfileStage stage) noexcept;

  bool m_active = false;
  uint8_t m_touched = 0;  // bit per stage
  uint8_t m_paths_used = 0;
  std::array<const char*, 4> m_paths{};
  std::array<uint64_t, profile_stage_count> m_ns{};
  Clock::time_point m_start, m_last;
};

/// Marks stage on the calling thread's running BatchTimer, if any.
void profile_mark(ProfileStage stage) noexcept;

}  // namespace ddstage::detail
