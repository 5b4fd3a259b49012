#include "cluster_layout.hpp"

#include <algorithm>
#include <string>

#include "ddstage/error.hpp"

namespace ddstage::detail {

ClusterLayout ClusterLayout::uniform(int nodes, int per_node) {
  if (nodes < 1 || per_node < 1)
    throw Error(ErrorKind::usage, "a cluster needs at least one node of at least one rank (got " +
                                      std::to_string(nodes) + " nodes of " +
                                      std::to_string(per_node) + ")");
  ClusterLayout layout;
  for (int n = 0; n <= nodes; ++n) layout.first_rank.push_back(n * per_node);
  return layout;
}

int ClusterLayout::node_of(int rank) const {
  const auto it = std::upper_bound(first_rank.begin(), first_rank.end(), rank);
  return static_cast<int>(it - first_rank.begin()) - 1;
}

}  // namespace ddstage::detail
