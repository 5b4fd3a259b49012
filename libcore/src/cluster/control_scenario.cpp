#include "control_scenario.hpp"

#include <algorithm>

#include "node_leader_core.hpp"
#include "split_mix.hpp"

namespace ddstage::detail {

namespace {

/// `count` distinct nodes in [1, nodes) other than `avoid`, `first` first when it can be.
std::vector<int> pick(int count, int nodes, int first, const std::vector<int>& avoid,
                      uint64_t seed) {
  std::vector<int> out;
  const auto usable = [&](int n) {
    return n > 0 && n < nodes && std::find(avoid.begin(), avoid.end(), n) == avoid.end() &&
           std::find(out.begin(), out.end(), n) == out.end();
  };
  if (count > 0 && usable(first)) out.push_back(first);
  SplitMix random(seed);
  const int room = nodes - 1 - static_cast<int>(avoid.size());
  while (static_cast<int>(out.size()) < std::min(count, room)) {
    const int n = 1 + static_cast<int>(random.below(static_cast<uint64_t>(nodes - 1)));
    if (usable(n)) out.push_back(n);
  }
  return out;
}

class TreeSimNode : public SimNode {
 public:
  TreeSimNode(int node, const ClusterLayout& layout, const ClusterTimings& timings, uint64_t seed)
      : m_core(node, layout, timings, seed), m_tick(timings.tick) {}
  void start(ClusterTime now, Outbox& out) override { m_core.start(now, out); }
  void tick(ClusterTime now, Outbox& out) override { m_core.tick(now, out); }
  void receive(ClusterTime now, const ClusterMessage& m, Outbox& out) override {
    m_core.receive(now, m, out);
  }
  void rank_exited(ClusterTime now, int rank, Outbox& out) override {
    m_core.rank_exited(now, rank, out);
  }
  uint64_t start_command(ClusterTime now, Outbox& out) override {
    return m_core.start_command(now, out);
  }
  ClusterTime cost(const ClusterMessage& m, const SimCosts& costs) const override {
    // Tree links are open connections; a probe's ping and its answer each open one.
    const bool fresh = m.op == ClusterOp::ping || m.op == ClusterOp::ack;
    return fresh ? costs.connect : costs.message;
  }
  ClusterTime tick_every() const override { return m_tick; }

 private:
  NodeLeaderCore m_core;
  ClusterTime m_tick;
};

/// The faults and commands of `s`, on nodes numbered as `node` maps them (the tree: one to
/// one; the flat protocol: each node to its ranks).
template <class Ranks>
void apply(const ControlScenario& s, ClusterSimulator& sim, Ranks ranks_of) {
  sim.starve(s.slowdown, s.cpu_wait);
  sim.lose(s.loss);
  for (int n : s.crashed())
    for (int r : ranks_of(n)) sim.crash(r, s.crash_at);
  for (int n : s.paused())
    for (int r : ranks_of(n)) sim.pause(r, s.pause_at, s.pause_length);
  if (s.partition_nodes > 0) {
    std::vector<int> side;
    for (int n : s.partitioned())
      for (int r : ranks_of(n)) side.push_back(r);
    sim.partition(side, s.partition_at, s.partition_length);
  }
  for (int i = 0; i < s.commands; ++i) sim.command(s.command_at + std::chrono::seconds(i));
}

}  // namespace

std::vector<int> ControlScenario::crashed() const {
  return pick(crash_nodes, nodes(), 1, {}, fault_seed ^ 0xc0ffee);
}

std::vector<int> ControlScenario::paused() const {
  return pick(pause_nodes, nodes(), 2, crashed(), fault_seed ^ 0xfeed);
}

std::vector<int> ControlScenario::partitioned() const {
  std::vector<int> out;
  for (int n = std::max(1, nodes() - partition_nodes); n < nodes(); ++n) out.push_back(n);
  return out;
}

SimReport simulate_tree(const ControlScenario& s, const ClusterTimings& timings,
                        const SimCosts& costs) {
  const auto layout = ClusterLayout::uniform(s.nodes(), s.per_node);
  ClusterSimulator sim(
      layout,
      [&](int node) { return std::make_unique<TreeSimNode>(node, layout, timings, s.seed); }, costs,
      s.seed);
  apply(s, sim, [](int node) { return std::vector<int>{node}; });
  // Killed processes: the last rank of nodes that neither crash nor pause.
  std::vector<int> avoid = s.crashed();
  const auto paused = s.paused();
  avoid.insert(avoid.end(), paused.begin(), paused.end());
  for (int n : pick(s.kill_ranks, s.nodes(), 3, avoid, s.fault_seed ^ 0xdead))
    sim.kill_rank(layout.first_rank[static_cast<std::size_t>(n) + 1] - 1, s.kill_at);
  return sim.run(s.end);
}

SimReport simulate_flat(const ControlScenario& s, const FlatSettings& settings,
                        const SimCosts& costs) {
  const int ranks = s.nodes() * s.per_node;
  const auto layout = ClusterLayout::uniform(ranks, 1);
  ClusterSimulator sim(
      layout, [&](int rank) { return std::make_unique<FlatControlModel>(rank, ranks, settings); },
      costs, s.seed);
  apply(s, sim, [&](int node) {
    std::vector<int> out;
    for (int r = node * s.per_node; r < (node + 1) * s.per_node; ++r) out.push_back(r);
    return out;
  });
  return sim.run(s.end);
}

}  // namespace ddstage::detail
