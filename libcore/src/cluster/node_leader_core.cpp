#include "node_leader_core.hpp"

#include <algorithm>

namespace ddstage::detail {

namespace {

/// A clock gap this long between two ticks means this node did not run (stopped, or starved of
/// CPU): it cannot tell what its neighbours did meanwhile.
ClusterTime stall_gap(const ClusterTimings& t) {
  return std::max(4 * t.tick, t.keepalive);
}

}  // namespace

NodeLeaderCore::NodeLeaderCore(int node, const ClusterLayout& layout, const ClusterTimings& timings,
                               uint64_t seed)
    : m_node(node),
      m_layout(layout),
      m_timings(timings),
      m_tree(layout.nodes(), timings.fanout),
      m_random(seed ^ (0x5851f42d4c957f2dULL * static_cast<uint64_t>(node + 1))),
      m_view(layout.nodes()) {
  if (node == 0) m_coordinator = std::make_unique<CoordinatorCore>(layout, timings, seed);
}

void NodeLeaderCore::start(ClusterTime now, Outbox&) {
  m_last_tick = now;
  relink(now);
}

void NodeLeaderCore::relink(ClusterTime now) {
  std::vector<int> wanted = m_tree.children(m_node, m_view.dead_nodes);
  if (const int p = m_tree.parent(m_node, m_view.dead_nodes); p >= 0) wanted.push_back(p);
  std::map<int, Link> links;
  for (int n : wanted) {
    const auto it = m_links.find(n);
    if (it != m_links.end()) {
      links.emplace(n, it->second);
      continue;
    }
    // First keepalives spread over one interval: nodes started together must not beat in step.
    const auto offset = ClusterTime(static_cast<ClusterTime::rep>(
        m_random.unit() * static_cast<double>(m_timings.keepalive.count())));
    links.emplace(n, Link{now, now + offset, std::nullopt});
  }
  m_links = std::move(links);
}

void NodeLeaderCore::keepalive(ClusterTime now, int to, Link& link, Outbox& out) {
  out.send(to, {ClusterOp::keepalive, m_node, -1, m_view.version});
  const double jitter = 0.8 + 0.4 * m_random.unit();
  link.next_keepalive = now + ClusterTime(static_cast<ClusterTime::rep>(
                                  jitter * static_cast<double>(m_timings.keepalive.count())));
}

void NodeLeaderCore::tick(ClusterTime now, Outbox& out) {
  if (m_lost) return;
  if (m_last_tick && now - *m_last_tick > stall_gap(m_timings)) {
    // Silence is counted only while this node was awake to hear: forgive the links the gap.
    const auto gap = now - *m_last_tick - m_timings.tick;
    for (auto& [n, link] : m_links) link.heard = std::min(now, link.heard + gap);
  }
  m_last_tick = now;
  for (auto& [n, link] : m_links) {
    if (now >= link.next_keepalive) keepalive(now, n, link, out);
    // Reported again while it stays silent, so that a report lost on the way costs little:
    // every reprobe through the parent (an open link), every suspect_after straight to the
    // coordinator (a connection of its own, and a dead leader's children all report it).
    const auto again = parent_answers(now) ? m_timings.reprobe : m_timings.suspect_after;
    if (now - link.heard >= m_timings.suspect_after &&
        (!link.reported || now - *link.reported >= again)) {
      link.reported = now;
      up(now, {ClusterOp::suspect, m_node, n}, out);
    }
  }
  if (!m_exited.empty() && (!m_exits_reported || now - *m_exits_reported >= m_timings.keepalive)) {
    // Not in a view yet: the report (or the view) was lost on the way.
    m_exits_reported = now;
    for (int rank : m_exited) up(now, {ClusterOp::rank_exited, m_node, rank}, out);
  }
  std::erase_if(m_witnessing,
                [&](const auto& w) { return now - w.second.second > m_timings.suspicion; });
  std::vector<uint64_t> late;
  for (const auto& [id, c] : m_commands)
    if (now >= c.deadline) late.push_back(id);
  for (uint64_t id : late) {
    auto& c = m_commands[id];
    // A child that did not answer in time: its whole subtree is missing from this reply (not
    // dead: judging that is failure detection's job).
    for (int child : c.waiting) subtree_ranks(child, c.missing);
    c.waiting.clear();
    finish_if_done(id, out);
  }
  if (m_coordinator) {
    if (auto next = m_coordinator->tick(now, m_view, out)) apply_view(now, *next, out);
  }
}

void NodeLeaderCore::receive(ClusterTime now, const ClusterMessage& m, Outbox& out) {
  if (m_lost) return;
  if (const auto it = m_links.find(m.from); it != m_links.end()) {
    it->second.heard = now;
    it->second.reported.reset();
  }
  switch (m.op) {
    case ClusterOp::keepalive:
      // Behind: its parent (this node, or the one it has not yet left) sends the view again.
      if (m.seq < m_view.version) out.send(m.from, m_view.message(m_node));
      break;
    case ClusterOp::suspect:
    case ClusterOp::rank_exited:
      // A report from a node behind the coordinator's view (one whose parent went silent, so
      // views stopped reaching it) brings the view back to it.
      if (m_coordinator && m.seq < m_view.version) out.send(m.from, m_view.message(m_node));
      up(now, m, out);
      break;
    case ClusterOp::probe_ack:
      up(now, m, out);
      break;
    case ClusterOp::probe_request:
      m_witnessing[m.seq] = {m.subject, now};
      out.send(m.subject, {ClusterOp::ping, m_node, m.subject, m.seq});
      break;
    case ClusterOp::ping:
      out.send(m.from, {ClusterOp::ack, m_node, m_node, m.seq});
      break;
    case ClusterOp::ack:
      if (const auto it = m_witnessing.find(m.seq); it != m_witnessing.end()) {
        up(now, {ClusterOp::probe_ack, m_node, it->second.first, m.seq}, out);
        m_witnessing.erase(it);
      } else if (m_coordinator) {
        m_coordinator->answered(m.from, m.seq);
      }
      break;
    case ClusterOp::view:
      if (m.seq > m_view.version) apply_view(now, m, out);
      break;
    case ClusterOp::command:
      command(now, m.from, m.seq, m.time_left, out);
      break;
    case ClusterOp::reply:
      reply(m.seq, m.from, m, out);
      break;
  }
}

void NodeLeaderCore::up(ClusterTime now, ClusterMessage m, Outbox& out) {
  if (m_coordinator) {
    switch (m.op) {
      case ClusterOp::suspect:
        m_coordinator->suspect(now, m.subject, m_view, out);
        break;
      case ClusterOp::rank_exited:
        m_coordinator->rank_exited(m.subject, m_view);
        break;
      case ClusterOp::probe_ack:
        m_coordinator->answered(m.subject, m.seq);
        break;
      default:
        break;
    }
    return;
  }
  // Through the parent while it answers; around a silent one, straight to the coordinator: a
  // report is rare, and an ancestor further up may be as dead as the parent (a whole subtree's
  // worth of nodes lost at once).
  m.from = m_node;
  if (m.op != ClusterOp::probe_ack) m.seq = m_view.version;  // so a coordinator can catch it up
  out.send(parent_answers(now) ? m_tree.parent(m_node, m_view.dead_nodes) : 0, std::move(m));
}

bool NodeLeaderCore::parent_answers(ClusterTime now) const {
  // Two keepalives missed: too early to suspect the parent, late enough not to trust it with a
  // report (a report it drops costs a round of the suspicion's time).
  const auto link = m_links.find(m_tree.parent(m_node, m_view.dead_nodes));
  return link != m_links.end() && now - link->second.heard < 2 * m_timings.keepalive;
}

void NodeLeaderCore::apply_view(ClusterTime now, const ClusterMessage& m, Outbox& out) {
  out.events.push_back(m_view.apply(m));
  if (m_view.node_dead(m_node)) {
    m_lost = true;
    out.events.push_back({ClusterEvent::Kind::self_lost, m_view.version});
    return;
  }
  std::erase_if(m_exited, [&](int rank) { return m_view.rank_dead(rank); });
  relink(now);
  ClusterMessage down = m;
  down.from = m_node;
  for (int child : m_tree.children(m_node, m_view.dead_nodes)) out.send(child, down);
  for (auto& [id, c] : m_commands) {
    for (int child : c.waiting)
      if (m_view.node_dead(child)) subtree_ranks(child, c.missing);
    std::erase_if(c.waiting, [&](int child) { return m_view.node_dead(child); });
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : m_commands) ids.push_back(id);
  for (uint64_t id : ids) finish_if_done(id, out);
}

void NodeLeaderCore::subtree_ranks(int node, std::vector<int>& out) const {
  std::vector<int> todo{node};
  for (std::size_t i = 0; i < todo.size(); ++i) {
    for (int r = m_layout.first_rank[static_cast<std::size_t>(todo[i])];
         r < m_layout.first_rank[static_cast<std::size_t>(todo[i]) + 1]; ++r)
      out.push_back(r);
    const auto children = m_tree.children(todo[i], m_view.dead_nodes);
    todo.insert(todo.end(), children.begin(), children.end());
  }
}

uint64_t NodeLeaderCore::start_command(ClusterTime now, Outbox& out) {
  const uint64_t id = m_next_command++;
  command(now, -1, id, m_timings.command_timeout, out);
  return id;
}

void NodeLeaderCore::command(ClusterTime now, int from, uint64_t id, ClusterTime time_left,
                             Outbox& out) {
  PendingCommand c;
  c.from = from;
  c.waiting = m_tree.children(m_node, m_view.dead_nodes);
  c.deadline = now + time_left;
  for (int r = m_layout.first_rank[static_cast<std::size_t>(m_node)];
       r < m_layout.first_rank[static_cast<std::size_t>(m_node) + 1]; ++r)
    (m_view.rank_dead(r) ? c.missing.push_back(r) : void(++c.answered));
  // Each level leaves its parent a quarter of its own time to pass on a partial reply.
  ClusterMessage down{ClusterOp::command, m_node, -1, id};
  down.time_left = time_left * 3 / 4;
  for (int child : c.waiting) out.send(child, down);
  m_commands[id] = std::move(c);
  finish_if_done(id, out);
}

void NodeLeaderCore::reply(uint64_t id, int child, const ClusterMessage& m, Outbox& out) {
  const auto it = m_commands.find(id);
  if (it == m_commands.end()) return;
  auto& c = it->second;
  const auto w = std::find(c.waiting.begin(), c.waiting.end(), child);
  if (w == c.waiting.end()) return;  // late, after this level gave up on it
  c.waiting.erase(w);
  c.answered += m.answered;
  c.missing.insert(c.missing.end(), m.dead_ranks.begin(), m.dead_ranks.end());
  finish_if_done(id, out);
}

void NodeLeaderCore::finish_if_done(uint64_t id, Outbox& out) {
  const auto it = m_commands.find(id);
  if (it == m_commands.end() || !it->second.waiting.empty()) return;
  auto& c = it->second;
  std::sort(c.missing.begin(), c.missing.end());
  if (c.from < 0) {
    ClusterEvent done{ClusterEvent::Kind::command_done, id, c.answered};
    done.dead_ranks = std::move(c.missing);
    out.events.push_back(std::move(done));
  } else {
    ClusterMessage up_reply{ClusterOp::reply, m_node, -1, id, c.answered};
    up_reply.dead_ranks = std::move(c.missing);
    out.send(c.from, std::move(up_reply));
  }
  m_commands.erase(it);
}

void NodeLeaderCore::rank_exited(ClusterTime now, int rank, Outbox& out) {
  if (m_lost || m_layout.node_of(rank) != m_node || m_view.rank_dead(rank) ||
      std::find(m_exited.begin(), m_exited.end(), rank) != m_exited.end())
    return;
  m_exited.push_back(rank);
  m_exits_reported = now;
  up(now, {ClusterOp::rank_exited, m_node, rank}, out);
}

}  // namespace ddstage::detail
