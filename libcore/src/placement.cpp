#include "ddstage/tool/placement.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/shard_layout.hpp"

namespace ddstage {
namespace {

/// Live ranks (non-empty host), interleaved over their hosts in order of first appearance: host
/// A's first rank, host B's first, ..., host A's second... Consecutive ranks of this order lie on
/// different hosts for as long as every host still has ranks left.
std::vector<int> interleaved(std::span<const std::string> hosts) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_host;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r].empty()) continue;
    auto& ranks = by_host[hosts[r]];
    if (ranks.empty()) order.push_back(hosts[r]);
    ranks.push_back(static_cast<int>(r));
  }
  std::vector<int> out;
  for (std::size_t round = 0, added = 1; added != 0; ++round) {
    added = 0;
    for (const auto& host : order) {
      const auto& ranks = by_host[host];
      if (round < ranks.size()) {
        out.push_back(ranks[round]);
        ++added;
      }
    }
  }
  return out;
}

std::size_t distinct_hosts(std::span<const std::string> hosts) {
  std::set<std::string> seen;
  for (const auto& h : hosts)
    if (!h.empty()) seen.insert(h);
  return seen.size();
}

/// One full copy over `ranks`, in sample order, balanced by bytes.
void add_copy(const Index& index, std::span<const int> ranks, std::vector<PlacedRange>& out) {
  const auto plan = ShardPlan::balance(index, static_cast<int>(ranks.size()));
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const ShardRange range = plan.range(static_cast<int>(i));
    if (range.count() != 0) out.push_back({ranks[i], range.first, range.last});
  }
}

uint64_t bytes_of(const Index& index, uint64_t first, uint64_t last) {
  return ShardLayout(index, {first, last}).total_bytes();
}

}  // namespace

std::vector<PlacedRange> ranges_of(const ShardPlan& plan) {
  std::vector<PlacedRange> out;
  for (int r = 0; r < plan.ranks(); ++r)
    out.push_back({r, plan.range(r).first, plan.range(r).last});
  return out;
}

std::vector<PlacedRange> plan_copies(const Index& index, std::span<const std::string> hosts,
                                     int replicas, std::string* warning) {
  const std::vector<int> order = interleaved(hosts);
  std::vector<PlacedRange> out;
  if (replicas == replicas_per_node) {
    // Every host's own ranks split a whole copy: a reader on any node finds every sample in
    // its shared memory.
    std::map<std::string, std::vector<int>> by_host;
    std::vector<std::string> host_order;
    for (int r : order) {
      auto& ranks = by_host[hosts[static_cast<std::size_t>(r)]];
      if (ranks.empty()) host_order.push_back(hosts[static_cast<std::size_t>(r)]);
      ranks.push_back(r);
    }
    for (const auto& host : host_order) {
      auto& ranks = by_host[host];
      std::sort(ranks.begin(), ranks.end());
      add_copy(index, ranks, out);
    }
    return out;
  }
  if (replicas < 1)
    throw UsageError(fmt::format("--replicas {}: need 1 or more, or node", replicas));
  const auto n = order.size();
  if (n < static_cast<std::size_t>(replicas)) {
    throw UsageError(fmt::format("--replicas {} needs at least {} live ranks; the store has {}",
                                 replicas, replicas, n));
  }
  // Chained copies: the samples are split into one shard per live rank; shard j's first copy
  // is on the rank at position j of the interleaved order, and each further copy on the rank
  // holding the fewest shards so far among those on a host without a copy of j (any rank
  // without one, when every host has one), nearest after j in the order on a tie. With equal
  // ranks per host that is positions j..j+K-1; in any case every rank holds about K shards
  // (K/n of the data), and a lost rank's readers move to K-1 different ranks, not to one whole
  // copy elsewhere.
  const auto plan = ShardPlan::balance(index, static_cast<int>(n));
  const std::size_t host_count = distinct_hosts(hosts);
  std::vector<std::size_t> load(n, 0);  // shards per position of the order
  std::vector<std::vector<int>> copies(n);
  bool shared_host = false;
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<std::size_t> taken{j};
    ++load[j];
    std::set<std::string> on{hosts[static_cast<std::size_t>(order[j])]};
    for (int c = 1; c < replicas; ++c) {
      std::size_t best = n;
      for (std::size_t step = 1; step < n; ++step) {
        const std::size_t at = (j + step) % n;
        if (std::find(taken.begin(), taken.end(), at) != taken.end()) continue;
        if (on.size() < host_count && on.contains(hosts[static_cast<std::size_t>(order[at])]))
          continue;
        if (best == n || load[at] < load[best]) best = at;
      }
      shared_host = shared_host || on.contains(hosts[static_cast<std::size_t>(order[best])]);
      taken.push_back(best);
      ++load[best];
      on.insert(hosts[static_cast<std::size_t>(order[best])]);
    }
    for (std::size_t at : taken) copies[j].push_back(order[at]);
  }
  for (int c = 0; c < replicas; ++c) {
    for (std::size_t j = 0; j < n; ++j) {
      const ShardRange range = plan.range(static_cast<int>(j));
      if (range.count() != 0)
        out.push_back({copies[j][static_cast<std::size_t>(c)], range.first, range.last});
    }
  }
  if (shared_host && warning) {
    *warning = fmt::format(
        "{} copies on {} host(s): some samples have several copies on one host, so a node's loss "
        "can cost more than one copy (a rank's loss costs one)",
        replicas, host_count);
  }
  return out;
}

std::vector<PlacedRange> plan_repair(const Index& index, std::span<const PlacedRange> held,
                                     std::span<const std::string> hosts, int replicas) {
  const auto live = [&](int r) {
    return static_cast<std::size_t>(r) < hosts.size() &&
           !hosts[static_cast<std::size_t>(r)].empty();
  };
  std::vector<uint64_t> load(hosts.size(), 0);  // bytes per rank, live regions and new ones
  for (const auto& g : held)
    if (live(g.rank)) load[static_cast<std::size_t>(g.rank)] += bytes_of(index, g.first, g.last);
  const Placement placement(held, index.samples());
  const std::size_t target =
      replicas == replicas_per_node ? distinct_hosts(hosts) : static_cast<std::size_t>(replicas);
  std::vector<PlacedRange> added;
  for (std::size_t s = 0; s < placement.stretches(); ++s) {
    const ShardRange range = placement.stretch(s);
    std::set<int> holders;
    std::set<std::string> holder_hosts;
    for (uint32_t g : placement.holders(s)) {
      if (!live(held[g].rank)) continue;
      holders.insert(held[g].rank);
      holder_hosts.insert(hosts[static_cast<std::size_t>(held[g].rank)]);
    }
    const uint64_t bytes = bytes_of(index, range.first, range.last);
    const auto copies = [&] {
      return replicas == replicas_per_node ? holder_hosts.size() : holders.size();
    };
    while (copies() < target) {
      // A host without a live copy first (per node: the only kind that counts), then any rank
      // not holding one; the least loaded of them.
      int best = -1;
      bool best_new_host = false;
      for (std::size_t r = 0; r < hosts.size(); ++r) {
        const int rank = static_cast<int>(r);
        if (!live(rank) || holders.contains(rank)) continue;
        const bool new_host = !holder_hosts.contains(hosts[r]);
        if (replicas == replicas_per_node && !new_host) continue;
        if (best < 0 || (new_host && !best_new_host) ||
            (new_host == best_new_host && load[r] < load[static_cast<std::size_t>(best)])) {
          best = rank;
          best_new_host = new_host;
        }
      }
      if (best < 0) break;  // fewer live ranks than copies: as many as there can be
      holders.insert(best);
      holder_hosts.insert(hosts[static_cast<std::size_t>(best)]);
      load[static_cast<std::size_t>(best)] += bytes;
      // A stretch continuing the rank's last new region extends it.
      auto it = std::find_if(added.rbegin(), added.rend(), [&](const PlacedRange& g) {
        return g.rank == best && g.last == range.first;
      });
      if (it != added.rend()) {
        it->last = range.last;
      } else {
        added.push_back({best, range.first, range.last});
      }
    }
  }
  return added;
}

const char* Coverage::state() const noexcept {
  if (samples_lost != 0) return "lost";
  return samples_short != 0 ? "degraded" : "healthy";
}

Coverage coverage(std::span<const PlacedRange> held, const std::vector<bool>& live,
                  std::span<const std::string> hosts, int replicas, uint64_t samples) {
  const auto is_live = [&](int r) {
    return static_cast<std::size_t>(r) < live.size() && live[static_cast<std::size_t>(r)];
  };
  Coverage out;
  for (const auto& g : held) {
    if (!is_live(g.rank) &&
        std::find(out.lost_ranks.begin(), out.lost_ranks.end(), g.rank) == out.lost_ranks.end())
      out.lost_ranks.push_back(g.rank);
  }
  std::sort(out.lost_ranks.begin(), out.lost_ranks.end());
  const auto host_of = [&](int r) -> const std::string& {
    static const std::string none;
    return static_cast<std::size_t>(r) < hosts.size() ? hosts[static_cast<std::size_t>(r)] : none;
  };
  std::size_t target = static_cast<std::size_t>(replicas);
  if (replicas == replicas_per_node) {
    // One copy per node that can hold one: a node whose every rank is lost holds none.
    std::set<std::string> with_live;
    for (std::size_t r = 0; r < hosts.size() && r < live.size(); ++r)
      if (live[r]) with_live.insert(hosts[r]);
    target = with_live.size();
  }
  const Placement placement(held, samples);
  for (std::size_t s = 0; s < placement.stretches(); ++s) {
    std::set<int> holders;
    std::set<std::string> on_hosts;
    for (uint32_t g : placement.holders(s)) {
      if (!is_live(held[g].rank)) continue;
      holders.insert(held[g].rank);
      on_hosts.insert(host_of(held[g].rank));
    }
    const std::size_t copies = replicas == replicas_per_node ? on_hosts.size() : holders.size();
    const ShardRange stretch = placement.stretch(s);
    const auto add = [&](std::vector<ShardRange>& ranges, uint64_t& total) {
      total += stretch.count();
      if (!ranges.empty() && ranges.back().last == stretch.first) {
        ranges.back().last = stretch.last;
      } else {
        ranges.push_back(stretch);
      }
    };
    if (copies < target) add(out.short_ranges, out.samples_short);
    if (copies == 0) add(out.lost_ranges, out.samples_lost);
  }
  return out;
}

Placement::Placement(std::span<const PlacedRange> regions, uint64_t samples) : m_end(samples) {
  std::vector<uint64_t> cuts{0, samples};
  for (const auto& g : regions) {
    if (g.first > g.last || g.last > samples) {
      throw IndexError(fmt::format("a region of rank {} holds samples {}..{}, outside 0..{}",
                                   g.rank, g.first, g.last, samples));
    }
    if (g.first == g.last) continue;
    cuts.push_back(g.first);
    cuts.push_back(g.last);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  cuts.pop_back();  // samples: the end, not a stretch's start
  if (samples == 0) cuts.clear();
  m_starts = std::move(cuts);
  // Count, then fill: holders stay in the order the regions were listed. Counted in 64 bits and
  // capped: a store.yaml of nested regions would otherwise ask for a quadratic table.
  constexpr std::size_t max_entries = std::size_t{1} << 26;
  std::vector<std::size_t> count(m_starts.size() + 1, 0);
  std::size_t entries = 0;
  const auto stretches_of = [&](const PlacedRange& g) {
    const auto a = static_cast<std::size_t>(
        std::lower_bound(m_starts.begin(), m_starts.end(), g.first) - m_starts.begin());
    const auto b = static_cast<std::size_t>(
        std::lower_bound(m_starts.begin(), m_starts.end(), g.last) - m_starts.begin());
    return std::pair{a, b};
  };
  for (const auto& g : regions) {
    if (g.first == g.last) continue;
    const auto [a, b] = stretches_of(g);
    entries += b - a;
    if (entries > max_entries) {
      throw IndexError(
          fmt::format("{} regions overlap too much to look samples up in (over {} "
                      "region stretches)",
                      regions.size(), max_entries));
    }
    for (std::size_t s = a; s < b; ++s) ++count[s + 1];
  }
  m_first.assign(count.size(), 0);
  std::partial_sum(count.begin(), count.end(), m_first.begin());
  m_holders.resize(m_first.back());
  std::vector<std::size_t> next(m_first.begin(), m_first.end() - 1);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].first == regions[i].last) continue;
    const auto [a, b] = stretches_of(regions[i]);
    for (std::size_t s = a; s < b; ++s) m_holders[next[s]++] = static_cast<uint32_t>(i);
  }
  for (std::size_t s = 0; s < m_starts.size(); ++s) {
    if (m_first[s] == m_first[s + 1]) {
      const ShardRange r = stretch(s);
      throw IndexError(
          fmt::format("no region holds samples {}..{} of {}", r.first, r.last - 1, samples));
    }
  }
}

std::size_t Placement::stretch_of(uint64_t sample) const noexcept {
  return static_cast<std::size_t>(std::upper_bound(m_starts.begin(), m_starts.end(), sample) -
                                  m_starts.begin()) -
         1;
}

}  // namespace ddstage
