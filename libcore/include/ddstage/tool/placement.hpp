// Which ranks hold which samples once a dataset may have several copies: the planner of copies
// (load --replicas), of the regions a repair adds, the health they add up to, and the lookup a
// reader makes per sample.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_plan.hpp"

namespace ddstage {

/// `replicas` value meaning one full copy per host (load --replicas node).
inline constexpr int replicas_per_node = 0;

/// Samples [first, last) held by one rank: one region of a dataset.
struct PlacedRange {
  int rank = 0;
  uint64_t first = 0;
  uint64_t last = 0;

  bool operator==(const PlacedRange&) const = default;
};

/// One region per rank, region r being rank r's range: an embedded store's single copy.
std::vector<PlacedRange> ranges_of(const ShardPlan& plan);

/// The regions of `replicas` copies of index (replicas_per_node: one per host, split over that
/// host's ranks by bytes). Otherwise the samples are split by bytes (ShardPlan::balance) into
/// one shard per live rank, and each shard's copies go to distinct ranks, about `replicas`
/// shards per rank. hosts: each rank's host, by rank; "" marks a rank that is lost and gets
/// nothing. A shard's copies lie on distinct hosts when there are at least `replicas` hosts, so
/// a node's loss costs at most one copy; with fewer hosts, `warning`, when given, says that a
/// node's loss can cost several. UsageError when there are fewer live ranks than copies.
/// Regions are returned copy by copy, each copy in sample order; empty regions (more ranks than
/// samples) are left out.
std::vector<PlacedRange> plan_copies(const Index& index, std::span<const std::string> hosts,
                                     int replicas, std::string* warning = nullptr);

/// New regions that bring every sample back to `replicas` live copies (replicas_per_node: one
/// per host with a live rank), given the regions held now and which ranks are live (hosts[r]
/// empty: lost). Each missing copy of a stretch of samples goes to a live rank on a host that
/// holds no live copy of it when there is one, the rank holding the fewest bytes first.
std::vector<PlacedRange> plan_repair(const Index& index, std::span<const PlacedRange> held,
                                     std::span<const std::string> hosts, int replicas);

/// How many live copies a dataset's samples have.
struct Coverage {
  uint64_t samples_short = 0;   ///< samples with fewer live copies than asked (lost ones too)
  uint64_t samples_lost = 0;    ///< samples with no live copy at all
  std::vector<int> lost_ranks;  ///< ranks holding a region of the dataset that are lost
  /// Which samples are short of copies, and which have none: [first, last) ranges in order,
  /// adjacent ones merged.
  std::vector<ShardRange> short_ranges;
  std::vector<ShardRange> lost_ranges;
  /// "healthy", "degraded" (some sample short of copies, none lost) or "lost".
  const char* state() const noexcept;
};

/// Coverage of a dataset of `samples` samples held as `held`, `live` by rank, against
/// `replicas` copies (replicas_per_node: one per host, hosts by rank).
Coverage coverage(std::span<const PlacedRange> held, const std::vector<bool>& live,
                  std::span<const std::string> hosts, int replicas, uint64_t samples);

/// Every region's samples, looked up per sample: the stretches where the set of regions holding
/// a sample is the same, and those regions (as indices into the list it was built from).
/// Read-only once built, so readers on many threads share it.
class Placement {
 public:
  /// IndexError unless every sample of [0, samples) is held by at least one region and every
  /// region lies inside it.
  Placement(std::span<const PlacedRange> regions, uint64_t samples);

  uint64_t samples() const noexcept { return m_starts.empty() ? 0 : m_end; }
  std::size_t stretches() const noexcept { return m_starts.size(); }
  /// The stretch holding sample (O(log stretches)); the caller checked sample < samples().
  std::size_t stretch_of(uint64_t sample) const noexcept;
  ShardRange stretch(std::size_t s) const noexcept {
    return {m_starts[s], s + 1 < m_starts.size() ? m_starts[s + 1] : m_end};
  }
  /// The regions holding stretch s, in the order they were listed.
  std::span<const uint32_t> holders(std::size_t s) const noexcept {
    return {m_holders.data() + m_first[s], m_first[s + 1] - m_first[s]};
  }

 private:
  std::vector<uint64_t> m_starts;   // first sample of each stretch
  uint64_t m_end = 0;               // samples
  std::vector<uint32_t> m_first;    // stretches + 1 offsets into m_holders
  std::vector<uint32_t> m_holders;  // region indices, stretch by stretch
};

}  // namespace ddstage
