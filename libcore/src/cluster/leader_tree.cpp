#include "leader_tree.hpp"

#include <string>

#include "ddstage/error.hpp"

namespace ddstage::detail {

LeaderTree::LeaderTree(int nodes, int fanout) : m_nodes(nodes), m_fanout(fanout) {
  if (nodes < 1 || fanout < 2)
    throw Error(ErrorKind::usage,
                "a leader tree needs at least 1 node and a fan-out of at least "
                "2 (got " +
                    std::to_string(nodes) + " nodes, fan-out " + std::to_string(fanout) + ")");
}

int LeaderTree::depth() const {
  int depth = 0;
  for (int n = m_nodes - 1; n > 0; n = (n - 1) / m_fanout) ++depth;
  return depth;
}

int LeaderTree::parent(int node, const std::vector<bool>& dead) const {
  for (int n = node; n > 0;) {
    n = (n - 1) / m_fanout;
    if (!dead[static_cast<std::size_t>(n)]) return n;
  }
  return -1;
}

std::vector<int> LeaderTree::children(int node, const std::vector<bool>& dead) const {
  std::vector<int> out;
  // Breadth-first through dead children: a subtree under a dead node hangs off its nearest live
  // ancestor. Indices only grow downwards, so the walk ends.
  std::vector<int> todo{node};
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const long first = static_cast<long>(todo[i]) * m_fanout + 1;
    for (long c = first; c < first + m_fanout && c < m_nodes; ++c) {
      const int child = static_cast<int>(c);
      (dead[static_cast<std::size_t>(child)] ? todo : out).push_back(child);
    }
  }
  return out;
}

}  // namespace ddstage::detail
