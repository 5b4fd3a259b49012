// The k-ary tree the node leaders form: commands go down it, replies and reports come up it, and
// its links carry the keepalives. Node 0 (the coordinator's) is the root; node n's parent is
// (n - 1) / k. A dead node's children attach to its nearest live ancestor, so every node that
// knows the same dead set draws the same tree, with no message to agree on it.
#pragma once

#include <vector>

namespace ddstage::detail {

class LeaderTree {
 public:
  LeaderTree(int nodes, int fanout);

  int nodes() const { return m_nodes; }
  int fanout() const { return m_fanout; }
  /// Links between the root and the deepest node (0 for one node).
  int depth() const;
  /// The parent in the tree with every node alive; -1 for the root.
  int static_parent(int node) const { return node > 0 ? (node - 1) / m_fanout : -1; }
  /// The nearest ancestor of `node` that is not dead; -1 for the root (or when every ancestor is
  /// dead, which cannot happen while the root lives). `dead` has one entry per node.
  int parent(int node, const std::vector<bool>& dead) const;
  /// The live nodes whose parent(dead) is `node`: its children, a dead child replaced by its own
  /// live children, recursively.
  std::vector<int> children(int node, const std::vector<bool>& dead) const;

 private:
  int m_nodes;
  int m_fanout;
};

}  // namespace ddstage::detail
