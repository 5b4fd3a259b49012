// Which rank holds which samples: contiguous id ranges, balanced by bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "ddstage/index.hpp"

namespace ddstage {

/// Samples [first, last) of one rank.
struct ShardRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t count() const noexcept { return last - first; }
};

/// Deterministic assignment of contiguous sample ranges to ranks, balanced by bytes (all
/// fields). Servers and clients compute the same plan from the same index and rank count.
/// Replica groups will be a second dimension of the plan; a range maps to one rank today.
class ShardPlan {
 public:
  /// Splits so that rank r starts at the first sample whose cumulative bytes reach r/ranks of
  /// the total; ranks may be empty when there are fewer samples than ranks.
  static ShardPlan balance(const Index& index, int ranks);
  /// A plan from its ranks + 1 boundaries (as published in store.yaml); UsageError if they are
  /// not non-decreasing from 0.
  static ShardPlan from_boundaries(std::vector<uint64_t> boundaries);

  int ranks() const noexcept { return static_cast<int>(m_boundaries.size()) - 1; }
  ShardRange range(int rank) const { return {m_boundaries.at(rank), m_boundaries.at(rank + 1)}; }
  /// The rank holding sample (O(log ranks)). Caller checks sample < samples().
  int owner(uint64_t sample) const noexcept;
  uint64_t samples() const noexcept { return m_boundaries.back(); }
  const std::vector<uint64_t>& boundaries() const noexcept { return m_boundaries; }

 private:
  std::vector<uint64_t> m_boundaries;
};

}  // namespace ddstage
