#include "cluster_simulator.hpp"

#include <algorithm>
#include <limits>

namespace ddstage::detail {

namespace {

double seconds(ClusterTime t) {
  return std::chrono::duration<double>(t).count();
}

ClusterTime scaled(ClusterTime t, double factor) {
  return ClusterTime(static_cast<ClusterTime::rep>(static_cast<double>(t.count()) * factor));
}

}  // namespace

ClusterSimulator::ClusterSimulator(const ClusterLayout& layout, Factory factory, SimCosts costs,
                                   uint64_t seed)
    : m_layout(layout), m_costs(costs), m_random(seed) {
  m_nodes.resize(static_cast<std::size_t>(layout.nodes()));
  for (int n = 0; n < layout.nodes(); ++n) m_nodes[static_cast<std::size_t>(n)].logic = factory(n);
}

void ClusterSimulator::starve(double slowdown, ClusterTime max_wait) {
  m_slowdown = slowdown;
  m_max_wait = max_wait;
}

void ClusterSimulator::lose(double probability) {
  m_loss = probability;
}

void ClusterSimulator::crash(int node, ClusterTime at) {
  m_crashes.emplace_back(node, at);
  push(at, Kind::crash, node);
}

void ClusterSimulator::pause(int node, ClusterTime at, ClusterTime length) {
  m_nodes[static_cast<std::size_t>(node)].pauses.emplace_back(at, at + length);
}

void ClusterSimulator::kill_rank(int rank, ClusterTime at) {
  m_kills.emplace_back(rank, at);
  push(at, Kind::kill_rank, rank);
}

void ClusterSimulator::partition(std::vector<int> side, ClusterTime at, ClusterTime length) {
  Partition p{std::vector<bool>(m_nodes.size(), false), at, at + length};
  for (int n : side) p.side[static_cast<std::size_t>(n)] = true;
  m_partitions.push_back(std::move(p));
}

void ClusterSimulator::command(ClusterTime at) {
  push(at, Kind::command, 0);
}

void ClusterSimulator::push(ClusterTime at, Kind kind, int node, ClusterMessage message) {
  m_events.push({at, m_order++, kind, node, std::move(message)});
}

std::pair<ClusterTime, ClusterTime> ClusterSimulator::serve(Node& n, ClusterTime at,
                                                            ClusterTime cost) {
  const bool idle = at >= n.busy_until;
  ClusterTime start = std::max(at, n.busy_until);
  for (const auto& [from, to] : n.pauses)
    if (start >= from && start < to) start = to;
  // A node that sleeps waits for the hog to give up a core before it runs; one that is working
  // through a backlog keeps its core (its slower pace is the slowdown).
  if (idle && m_max_wait.count() > 0) start += scaled(m_max_wait, m_random.unit());
  const ClusterTime done = start + scaled(cost, m_slowdown);
  n.busy_total += done - start;
  n.busy_until = done;
  return {start, done};
}

bool ClusterSimulator::cut(int a, int b, ClusterTime at) const {
  for (const auto& p : m_partitions)
    if (at >= p.from && at < p.to &&
        p.side[static_cast<std::size_t>(a)] != p.side[static_cast<std::size_t>(b)])
      return true;
  return false;
}

void ClusterSimulator::dispatch(int node, ClusterTime now, Outbox& out) {
  Node& n = m_nodes[static_cast<std::size_t>(node)];
  // Sending is work too: the node's queue stays busy while it writes each message.
  n.busy_until += scaled(m_costs.message, m_slowdown) * static_cast<long>(out.sends.size());
  for (auto& e : out.events) {
    if (e.kind == ClusterEvent::Kind::self_lost) n.lost = true;
    if (e.kind == ClusterEvent::Kind::command_done) m_done.emplace_back(now, e);
    m_learned.push_back({now, node, std::move(e)});
  }
  for (auto& s : out.sends) {
    if (s.to < 0 || s.to >= static_cast<int>(m_nodes.size())) continue;
    if (cut(node, s.to, n.busy_until)) continue;
    ClusterTime arrive = n.busy_until + m_costs.latency + scaled(m_costs.jitter, m_random.unit());
    while (m_loss > 0 && m_random.unit() < m_loss) arrive += std::chrono::milliseconds(200);
    push(arrive, Kind::deliver, s.to, std::move(s.message));
  }
}

SimReport ClusterSimulator::run(ClusterTime end) {
  for (int i = 0; i < static_cast<int>(m_nodes.size()); ++i) {
    Outbox out;
    m_nodes[static_cast<std::size_t>(i)].logic->start(ClusterTime{}, out);
    dispatch(i, ClusterTime{}, out);
    push(m_nodes[static_cast<std::size_t>(i)].logic->tick_every(), Kind::tick, i);
  }
  while (!m_events.empty() && m_events.top().at <= end) {
    Event e = m_events.top();
    m_events.pop();
    if (e.kind == Kind::crash) {
      m_nodes[static_cast<std::size_t>(e.node)].crashed = e.at;
      continue;
    }
    const int node = e.kind == Kind::kill_rank ? m_layout.node_of(e.node) : e.node;
    Node& n = m_nodes[static_cast<std::size_t>(node)];
    if (n.crashed || n.lost) continue;
    Outbox out;
    switch (e.kind) {
      case Kind::deliver: {
        const auto [start, done] = serve(n, e.at, n.logic->cost(e.message, m_costs));
        ++m_delivered;
        if (node == 0) ++m_coordinator_inbound;
        n.logic->receive(done, e.message, out);
        dispatch(node, done, out);
        break;
      }
      case Kind::tick: {
        const auto [start, done] = serve(n, e.at, m_costs.message);
        n.logic->tick(done, out);
        dispatch(node, done, out);
        // A timer that fires while its node is busy fires once when the node gets to it.
        push(std::max(e.at + n.logic->tick_every(), done), Kind::tick, node);
        break;
      }
      case Kind::kill_rank: {
        // The leader sees its rank's process end at once (pidfd), at the cost of one message.
        const auto [start, done] = serve(n, e.at, m_costs.message);
        n.logic->rank_exited(done, e.node, out);
        dispatch(node, done, out);
        break;
      }
      case Kind::command: {
        const auto [start, done] = serve(n, e.at, m_costs.message);
        m_commands_started[n.logic->start_command(done, out)] = e.at;
        dispatch(node, done, out);
        break;
      }
      case Kind::crash:
        break;
    }
  }
  return report(end);
}

SimReport ClusterSimulator::report(ClusterTime end) const {
  SimReport r;
  r.nodes = m_layout.nodes();
  r.ranks = m_layout.ranks();
  r.messages = m_delivered;
  const double run_s = std::max(seconds(end), 1e-9);
  r.coordinator_inbound_per_s = static_cast<double>(m_coordinator_inbound) / run_s;
  r.coordinator_busy = std::min(1.0, seconds(m_nodes[0].busy_total) / run_s);

  const auto live_holder = [&](int n) {
    const Node& node = m_nodes[static_cast<std::size_t>(n)];
    return !node.crashed && !node.lost && node.logic->holds_view();
  };
  // When each view-holding node first learned each node and rank dead.
  std::map<int, std::map<int, ClusterTime>> node_learned, rank_learned;
  std::vector<uint64_t> version(m_nodes.size(), 0);
  std::optional<ClusterTime> first_verdict, last_verdict;
  for (const auto& l : m_learned) {
    if (l.event.kind != ClusterEvent::Kind::view_applied) continue;
    version[static_cast<std::size_t>(l.node)] = l.event.seq;
    for (int d : l.event.dead_nodes) node_learned[d].emplace(l.node, l.at);
    for (int d : l.event.dead_ranks) rank_learned[d].emplace(l.node, l.at);
    if (l.node == 0) {
      const bool names_crashed =
          std::any_of(l.event.dead_nodes.begin(), l.event.dead_nodes.end(), [&](int d) {
            return std::any_of(m_crashes.begin(), m_crashes.end(),
                               [&](const auto& c) { return c.first == d; });
          });
      if (names_crashed) {
        if (!first_verdict) first_verdict = l.at;
        last_verdict = l.at;
      }
    }
  }
  const auto everywhere = [&](const std::map<int, ClusterTime>* learned, ClusterTime since) {
    ClusterTime last = since;
    for (int n = 0; n < r.nodes; ++n) {
      if (!live_holder(n)) continue;
      if (!learned) return std::numeric_limits<double>::infinity();
      const auto it = learned->find(n);
      if (it == learned->end()) return std::numeric_limits<double>::infinity();
      last = std::max(last, it->second);
    }
    return seconds(last - since);
  };
  for (const auto& [node, at] : m_crashes) {
    const auto it = node_learned.find(node);
    r.detect_node_s.push_back(everywhere(it == node_learned.end() ? nullptr : &it->second, at));
  }
  for (const auto& [rank, at] : m_kills) {
    const auto it = rank_learned.find(rank);
    r.detect_rank_s.push_back(everywhere(it == rank_learned.end() ? nullptr : &it->second, at));
  }
  if (first_verdict) r.verdict_spread_s = seconds(*last_verdict - *first_verdict);
  r.views = version[0];
  r.converged = true;
  for (int n = 0; n < r.nodes; ++n)
    if (live_holder(n) && version[static_cast<std::size_t>(n)] != version[0]) r.converged = false;
  for (const auto& [n, at] : node_learned)
    if (at.contains(0)) r.declared_dead.push_back(n);
  for (const auto& [at, e] : m_done) {
    const auto started = m_commands_started.find(e.seq);
    if (started == m_commands_started.end()) continue;
    r.command_s.push_back(seconds(at - started->second));
    r.command_answered.push_back(e.answered);
    r.command_missing.push_back(e.dead_ranks.size());
  }
  return r;
}

}  // namespace ddstage::detail
