#include "coordinator_core.hpp"

#include <algorithm>

namespace ddstage::detail {

CoordinatorCore::CoordinatorCore(const ClusterLayout& layout, const ClusterTimings& timings,
                                 uint64_t seed)
    : m_layout(layout),
      m_timings(timings),
      m_tree(layout.nodes(), timings.fanout),
      m_random(seed) {}

void CoordinatorCore::suspect(ClusterTime now, int subject, const ClusterView& view, Outbox& out) {
  if (subject <= 0 || subject >= m_layout.nodes() || m_suspects.contains(subject)) return;
  suspect_one(now, subject, view, out);
  const auto it = m_suspects.find(subject);
  if (it == m_suspects.end()) return;
  it->second.children_suspected = true;
  for (int child : m_tree.children(subject, view.dead_nodes)) suspect_one(now, child, view, out);
}

void CoordinatorCore::suspect_one(ClusterTime now, int subject, const ClusterView& view,
                                  Outbox& out) {
  if (subject <= 0 || subject >= m_layout.nodes() || view.node_dead(subject) ||
      m_suspects.contains(subject) ||
      std::find(m_verdicts.begin(), m_verdicts.end(), subject) != m_verdicts.end())
    return;
  Suspicion& s = m_suspects[subject];
  s.deadline = now + m_timings.suspicion;
  s.first_seq = m_next_seq;
  probe(now, subject, s, view, out);
}

void CoordinatorCore::probe(ClusterTime now, int subject, Suspicion& s, const ClusterView& view,
                            Outbox& out) {
  // A fresh probe id each round: an answer proves life after the round began. The witnesses
  // differ each round, so one cut link or one starved witness cannot decide alone.
  s.seq = m_next_seq++;
  s.next_probe = now + m_timings.reprobe;
  out.send(subject, {ClusterOp::ping, 0, subject, s.seq});
  const int nodes = m_layout.nodes();
  if (nodes <= 2) return;
  for (int i = 0, tries = 0; i < m_timings.witnesses && tries < 4 * m_timings.witnesses; ++tries) {
    const int w = 1 + static_cast<int>(m_random.below(static_cast<uint64_t>(nodes - 1)));
    if (w == subject || view.node_dead(w)) continue;
    out.send(w, {ClusterOp::probe_request, 0, subject, s.seq});
    ++i;
  }
}

void CoordinatorCore::answered(int subject, uint64_t seq) {
  const auto it = m_suspects.find(subject);
  if (it == m_suspects.end() || seq < it->second.first_seq || seq > it->second.seq) return;
  m_suspects.erase(it);
}

void CoordinatorCore::rank_exited(int rank, const ClusterView& view) {
  if (rank < 0 || rank >= m_layout.ranks() || view.rank_dead(rank) ||
      view.node_dead(m_layout.node_of(rank)) ||
      std::find(m_exited.begin(), m_exited.end(), rank) != m_exited.end())
    return;
  m_exited.push_back(rank);
}

std::optional<ClusterMessage> CoordinatorCore::tick(ClusterTime now, const ClusterView& view,
                                                    Outbox& out) {
  for (auto it = m_suspects.begin(); it != m_suspects.end();) {
    if (now >= it->second.deadline) {
      m_verdicts.push_back(it->first);
      it = m_suspects.erase(it);
      continue;
    }
    if (now >= it->second.next_probe) {
      probe(now, it->first, it->second, view, out);
      if (!it->second.children_suspected) {
        it->second.children_suspected = true;
        for (int child : m_tree.children(it->first, view.dead_nodes))
          suspect_one(now, child, view, out);
      }
    }
    ++it;
  }
  if (m_verdicts.empty() && m_exited.empty()) return std::nullopt;
  ClusterMessage next = view.message(0);
  next.seq = view.version + 1;
  next.dead_nodes.insert(next.dead_nodes.end(), m_verdicts.begin(), m_verdicts.end());
  std::sort(next.dead_nodes.begin(), next.dead_nodes.end());
  next.dead_ranks.insert(next.dead_ranks.end(), m_exited.begin(), m_exited.end());
  std::sort(next.dead_ranks.begin(), next.dead_ranks.end());
  m_verdicts.clear();
  m_exited.clear();
  return next;
}

}  // namespace ddstage::detail
