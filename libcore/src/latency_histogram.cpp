#include "ddstage/latency_histogram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace ddstage {

// Values below 2^sub_bits get a bucket each; above, each power of two [2^e, 2^(e+1)) splits
// into 2^sub_bits equal buckets, so a bucket is never wider than 1/16 of its values.
int LatencyHistogram::bucket_of(uint64_t v) noexcept {
  constexpr uint64_t sub = uint64_t{1} << sub_bits;
  if (v < sub) return static_cast<int>(v);
  const int e = std::bit_width(v) - 1;  // >= sub_bits
  const int shift = e - sub_bits;
  return ((shift + 1) << sub_bits) + static_cast<int>((v >> shift) & (sub - 1));
}

uint64_t LatencyHistogram::lower_bound_of(int bucket) noexcept {
  constexpr int sub = 1 << sub_bits;
  if (bucket < sub) return static_cast<uint64_t>(bucket);
  const int shift = (bucket >> sub_bits) - 1;
  return static_cast<uint64_t>(sub + (bucket & (sub - 1))) << shift;
}

void LatencyHistogram::record(uint64_t ns) noexcept {
  ++m_counts[static_cast<std::size_t>(bucket_of(ns))];
  ++m_count;
  m_sum += ns;
  m_min = std::min(m_min, ns);
  m_max = std::max(m_max, ns);
}

void LatencyHistogram::merge(const LatencyHistogram& other) noexcept {
  for (std::size_t i = 0; i < m_counts.size(); ++i) m_counts[i] += other.m_counts[i];
  m_count += other.m_count;
  m_sum += other.m_sum;
  m_min = std::min(m_min, other.m_min);
  m_max = std::max(m_max, other.m_max);
}

uint64_t LatencyHistogram::percentile(double p) const noexcept {
  if (m_count == 0) return 0;
  const auto rank = std::clamp<uint64_t>(
      static_cast<uint64_t>(std::ceil(std::clamp(p, 0.0, 1.0) * static_cast<double>(m_count))), 1,
      m_count);
  if (rank == m_count) return m_max;
  if (rank == 1) return m_min;
  uint64_t seen = 0;
  for (int b = 0; b < buckets; ++b) {
    seen += m_counts[static_cast<std::size_t>(b)];
    if (seen < rank) continue;
    const uint64_t lo = lower_bound_of(b);
    const uint64_t hi = b + 1 < buckets ? lower_bound_of(b + 1) - 1 : UINT64_MAX;
    return std::clamp(lo + (hi - lo) / 2, min(), m_max);
  }
  return m_max;
}

}  // namespace ddstage
