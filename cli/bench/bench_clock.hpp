// The benches' stopwatch: one definition for every bench, which a unity build also requires.
#pragma once

#include <chrono>

namespace ddstage::cli {

/// Seconds on the steady clock from t0 to now.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ddstage::cli
