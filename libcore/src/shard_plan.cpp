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
  // 128-bit products the split is exact and identical on every node. Walked a stretch of rows
  // of one size per field at a time (runs), so the plan costs O(runs + ranks), not O(samples).
  uint64_t before = 0;
  int next_rank = 1;
  for (uint64_t s = 0; s < n && next_rank < ranks;) {
    uint64_t end = n;
    uint64_t per_sample = 0;  // bytes of each sample in [s, end)
    for (uint32_t f = 0; f < fields; ++f) {
      end = std::min(end, index.run_end(s, f));
      per_sample += index.entry(s, f).length;
    }
    // Sample s + k reaches rank r when (before + k * per_sample) * ranks >= total * r.
    while (next_rank < ranks) {
      const uint128 want = uint128{total} * static_cast<unsigned>(next_rank);
      const uint128 have = uint128{before} * static_cast<unsigned>(ranks);
      uint128 k = 0;
      if (have < want) {
        if (per_sample == 0) break;
        const uint128 step = uint128{per_sample} * static_cast<unsigned>(ranks);
        k = (want - have + step - 1) / step;
      }
      if (k >= end - s) break;
      plan.m_boundaries[next_rank++] = s + static_cast<uint64_t>(k);
    }
    before += (end - s) * per_sample;
    s = end;
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
