// What the control plane agrees on: which nodes and ranks are dead, under a version that only
// the coordinator moves forward. Views travel whole (dead sets are small next to the store), so
// a node that missed one catches up from the next.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cluster_message.hpp"

namespace ddstage::detail {

struct ClusterView {
  uint64_t version = 0;
  std::vector<bool> dead_nodes;  ///< one entry per node
  std::vector<int> dead_ranks;   ///< sorted; ranks that ended on a live node

  explicit ClusterView(int nodes = 0) : dead_nodes(static_cast<std::size_t>(nodes), false) {}

  bool node_dead(int node) const { return dead_nodes[static_cast<std::size_t>(node)]; }
  bool rank_dead(int rank) const {
    return std::binary_search(dead_ranks.begin(), dead_ranks.end(), rank);
  }
  std::vector<int> dead_node_list() const {
    std::vector<int> out;
    for (std::size_t n = 0; n < dead_nodes.size(); ++n)
      if (dead_nodes[n]) out.push_back(static_cast<int>(n));
    return out;
  }
  /// The view as a message to send down the tree.
  ClusterMessage message(int from) const {
    ClusterMessage m{ClusterOp::view, from};
    m.seq = version;
    m.dead_nodes = dead_node_list();
    m.dead_ranks = dead_ranks;
    return m;
  }
  /// Takes a newer view from a message; the event names what is newly dead. Ignores nodes and
  /// ranks out of range (the message came from this store's coordinator, but a bound costs
  /// nothing).
  ClusterEvent apply(const ClusterMessage& m) {
    ClusterEvent event{ClusterEvent::Kind::view_applied, m.seq};
    version = m.seq;
    for (int n : m.dead_nodes) {
      if (n < 0 || static_cast<std::size_t>(n) >= dead_nodes.size() || node_dead(n)) continue;
      dead_nodes[static_cast<std::size_t>(n)] = true;
      event.dead_nodes.push_back(n);
    }
    for (int r : m.dead_ranks) {
      if (!rank_dead(r)) event.dead_ranks.push_back(r);
    }
    dead_ranks = m.dead_ranks;
    std::sort(dead_ranks.begin(), dead_ranks.end());
    return event;
  }
};

}  // namespace ddstage::detail
