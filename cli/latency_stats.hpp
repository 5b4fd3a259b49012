// Summaries of per-operation timings for bench output: mean and tail percentiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace ddstage::cli {

struct LatencyStats {
  double mean = 0, p50 = 0, p99 = 0, p999 = 0, max = 0;
};

/// Sorts `us` in place and summarises it (nearest-rank percentiles).
inline LatencyStats summarize(std::vector<double>& us) {
  LatencyStats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto pct = [&us](double p) {
    auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(us.size())));
    return us[std::min(us.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.mean = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  s.p50 = pct(0.50);
  s.p99 = pct(0.99);
  s.p999 = pct(0.999);
  s.max = us.back();
  return s;
}

}  // namespace ddstage::cli
