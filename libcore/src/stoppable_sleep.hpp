// A worker thread's pause between rounds that a stop request cuts short.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace ddstage::detail {

/// Sleeps for `duration`, or until `stop` is requested (so a jthread's destructor does not wait
/// out the pause); true when the whole pause passed without a stop request.
inline bool sleep_unless_stopped(const std::stop_token& stop, std::chrono::milliseconds duration) {
  std::mutex mutex;
  std::condition_variable_any wake;
  std::unique_lock lock(mutex);
  wake.wait_for(lock, stop, duration, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace ddstage::detail
