// The situations the control plane is proven in (tests/unit/test_control_scenarios.cpp) and
// measured in (`ddstage bench control --simulate`): a store of N ranks, and what happens to it.
// One scenario runs under the leader tree or under today's flat protocol, on the same
// simulator, costs and seed.
#pragma once

#include <cstdint>

#include "cluster_simulator.hpp"
#include "cluster_timings.hpp"
#include "flat_control_model.hpp"

namespace ddstage::detail {

struct ControlScenario {
  int ranks = 1000;
  int per_node = 4;
  int crash_nodes = 0;  ///< node 1 (a leader with children) first, then others by the seed
  ClusterTime crash_at = std::chrono::seconds(5);
  int kill_ranks = 0;  ///< single processes on live nodes
  ClusterTime kill_at = std::chrono::seconds(5);
  int pause_nodes = 0;  ///< node 2 first, then others by the seed; never a crashed one
  ClusterTime pause_at = std::chrono::seconds(4);
  ClusterTime pause_length = std::chrono::seconds(2);
  double slowdown = 1;  ///< every node's CPU shared with a hog (ClusterSimulator::starve)
  ClusterTime cpu_wait{};
  double loss = 0;
  int partition_nodes = 0;  ///< the highest-numbered nodes, cut off from the rest
  ClusterTime partition_at = std::chrono::seconds(4);
  ClusterTime partition_length = std::chrono::seconds(2);
  int commands = 0;  ///< status round trips, one a second
  ClusterTime command_at = std::chrono::seconds(2);
  ClusterTime end = std::chrono::seconds(20);
  uint64_t seed = 1;        ///< message order: latencies, jitter, loss, witnesses
  uint64_t fault_seed = 1;  ///< which nodes crash, pause and lose a rank

  int nodes() const { return (ranks + per_node - 1) / per_node; }
  /// The nodes that crash, pause and are cut off, as both protocols see them.
  std::vector<int> crashed() const;
  std::vector<int> paused() const;
  std::vector<int> partitioned() const;
};

/// The scenario under the leader tree (NodeLeaderCore on every node).
SimReport simulate_tree(const ControlScenario& s, const ClusterTimings& timings,
                        const SimCosts& costs);
/// The scenario under today's flat protocol: every rank a simulated endpoint of its own, a
/// node's crash the crash of all its ranks; node numbers in the report are ranks.
SimReport simulate_flat(const ControlScenario& s, const FlatSettings& settings,
                        const SimCosts& costs);

}  // namespace ddstage::detail
