#include "ddstage/tool/shard_plan.hpp"

#include <algorithm>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

__extension__ using uint128 = unsigned __int128;  // exact products of byte counts and rank ids

}  // namespace

ShardPlan ShardPlan::balance(const Index& index, int ranks) {
  if (ranks < 1) throw UsageError("a shard plan needs at least one rank");
  const uint64_t n = index.samples();
  const auto fields = static_cast<uint32_t>(index.fields().size());
  const uint64_t total = index.manifest().total_bytes;
  ShardPlan plan;
  plan.m_boundaries.assign(static_cast<std::size_t>(ranks) + 1, n);
  plan.m_boundaries[0] = 0;
  // Rank r starts at the first sample whose preceding bytes reach r/ranks of the total; with
  // 128-bit products the split is exact and identical on every node.
  uint64_t before = 0;
  int next_rank = 1;
  for (uint64_t s = 0; s < n && next_rank < ranks; ++s) {
    while (next_rank < ranks && uint128{before} * static_cast<unsigned>(ranks) >=
                                    uint128{total} * static_cast<unsigned>(next_rank)) {
      plan.m_boundaries[next_rank++] = s;
    }
    for (uint32_t f = 0; f < fields; ++f) before += index.entry(s, f).length;
  }
  return plan;
}

ShardPlan ShardPlan::from_boundaries(std::vector<uint64_t> boundaries) {
  if (boundaries.size() < 2 || boundaries.front() != 0 ||
      !std::is_sorted(boundaries.begin(), boundaries.end())) {
    throw UsageError("bad shard boundaries: need ranks + 1 non-decreasing values from 0");
  }
  ShardPlan plan;
  plan.m_boundaries = std::move(boundaries);
  return plan;
}

int ShardPlan::owner(uint64_t sample) const noexcept {
  // The last boundary <= sample; empty ranks share a boundary with the next one.
  auto it = std::upper_bound(m_boundaries.begin(), m_boundaries.end() - 1, sample);
  return static_cast<int>(it - m_boundaries.begin()) - 1;
}

}  // namespace ddstage
