// Which ranks live on which node, as the control plane at scale sees a store.
#pragma once

#include <vector>

namespace ddstage::detail {

/// Which ranks live on which node: node n holds ranks [first_rank[n], first_rank[n + 1]), its
/// lowest rank is its leader, node 0 holds rank 0 (the coordinator).
struct ClusterLayout {
  std::vector<int> first_rank;  ///< nodes + 1 entries, the last one the number of ranks

  /// `nodes` nodes of `per_node` ranks each.
  static ClusterLayout uniform(int nodes, int per_node);
  int nodes() const { return static_cast<int>(first_rank.size()) - 1; }
  int ranks() const { return first_rank.back(); }
  int node_of(int rank) const;
};

}  // namespace ddstage::detail
