#include "flat_control_model.hpp"

#include "peer_watch.hpp"

namespace ddstage::detail {

FlatControlModel::FlatControlModel(int rank, int ranks, const FlatSettings& settings)
    : m_rank(rank), m_settings(settings) {
  if (rank == 0) {
    m_heard.assign(static_cast<std::size_t>(ranks), ClusterTime{});
    m_lost.assign(static_cast<std::size_t>(ranks), false);
  }
}

void FlatControlModel::start(ClusterTime now, Outbox&) {
  for (auto& h : m_heard) h = now;
}

ClusterTime FlatControlModel::tick_every() const {
  // Rank 0's PeerWatch checks every half heartbeat interval; the others beat once an interval.
  const auto interval = heartbeat_interval(m_settings.peer_timeout);
  return m_rank == 0 ? ClusterTime(interval / 2) : ClusterTime(interval);
}

ClusterTime FlatControlModel::cost(const ClusterMessage&, const SimCosts& costs) const {
  return costs.connect;  // every message of the flat protocol comes on a connection of its own
}

void FlatControlModel::tick(ClusterTime now, Outbox& out) {
  if (m_rank != 0) {
    out.send(0, {ClusterOp::keepalive, m_rank});
    return;
  }
  const ClusterTime timeout(m_settings.peer_timeout);
  for (std::size_t r = 1; r < m_heard.size(); ++r) {
    if (!m_lost[r] && now - m_heard[r] > timeout) {
      mark_lost({static_cast<int>(r)}, out);
      return;  // one a turn
    }
  }
}

void FlatControlModel::mark_lost(std::vector<int> ranks, Outbox& out) {
  for (int r : ranks) m_lost[static_cast<std::size_t>(r)] = true;
  ClusterEvent e{ClusterEvent::Kind::view_applied, ++m_version};
  e.dead_nodes = std::move(ranks);
  out.events.push_back(std::move(e));
}

void FlatControlModel::receive(ClusterTime now, const ClusterMessage& m, Outbox& out) {
  if (m_rank != 0) {
    if (m.op == ClusterOp::command) out.send(0, {ClusterOp::reply, m_rank, -1, m.seq, 1});
    return;
  }
  const auto from = static_cast<std::size_t>(m.from);
  if (from < m_heard.size() && !m_lost[from]) m_heard[from] = now;
  if (m.op == ClusterOp::reply && m.seq == m_command && m_waiting > 0 && --m_waiting == 0) {
    ClusterEvent done{ClusterEvent::Kind::command_done, m_command,
                      m_heard.size() - m_failed.size()};
    done.dead_ranks = m_failed;
    out.events.push_back(std::move(done));
  }
}

void FlatControlModel::rank_exited(ClusterTime, int, Outbox&) {
  // The flat protocol has no node leader: a rank's end is seen only as its heartbeats stop.
}

uint64_t FlatControlModel::start_command(ClusterTime, Outbox& out) {
  m_command = m_next_command++;
  m_failed.clear();
  m_waiting = 0;
  // One thread and connection per rank, all open at once: past the descriptor limit, connect
  // fails with EMFILE and the rank is marked lost.
  const auto budget = static_cast<std::size_t>(m_settings.fd_limit - m_settings.fds_in_use);
  for (std::size_t r = 1; r < m_heard.size(); ++r) {
    if (m_lost[r]) continue;
    if (m_waiting >= budget) {
      m_failed.push_back(static_cast<int>(r));
      continue;
    }
    ++m_waiting;
    out.send(static_cast<int>(r), {ClusterOp::command, 0, -1, m_command});
  }
  if (!m_failed.empty()) mark_lost(m_failed, out);
  return m_command;
}

}  // namespace ddstage::detail
