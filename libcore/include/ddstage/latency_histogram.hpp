// Log-bucketed histogram of durations: constant memory, mergeable across threads, percentiles
// to within 1/16 of the value. Bench tails (p99, p99.9) and the read profile use it, so a
// run of millions of calls keeps 8 KB per series instead of every sample.
#pragma once

#include <array>
#include <cstdint>

namespace ddstage {

class LatencyHistogram {
 public:
  /// Records one value in nanoseconds (any unit works; the summaries keep it).
  void record(uint64_t ns) noexcept;
  /// Adds other's counts: per-thread histograms merge into one report.
  void merge(const LatencyHistogram& other) noexcept;
  void clear() noexcept { *this = LatencyHistogram{}; }

  uint64_t count() const noexcept { return m_count; }
  uint64_t sum() const noexcept { return m_sum; }
  uint64_t min() const noexcept { return m_count ? m_min : 0; }
  uint64_t max() const noexcept { return m_max; }
  double mean() const noexcept {
    return m_count ? static_cast<double>(m_sum) / static_cast<double>(m_count) : 0;
  }
  /// The value at fraction p (0..1) of the recorded ones, nearest rank, as the middle of its
  /// bucket clamped to [min, max]: exact below 16 and for the first and last rank, within 1/16
  /// otherwise. 0 when empty.
  uint64_t percentile(double p) const noexcept;

 private:
  static constexpr int sub_bits = 4;  // 16 buckets per power of two
  static constexpr int buckets = (64 - sub_bits + 1) << sub_bits;
  static int bucket_of(uint64_t v) noexcept;
  static uint64_t lower_bound_of(int bucket) noexcept;

  std::array<uint64_t, buckets> m_counts{};
  uint64_t m_count = 0;
  uint64_t m_sum = 0;
  uint64_t m_min = UINT64_MAX;
  uint64_t m_max = 0;
};

}  // namespace ddstage
