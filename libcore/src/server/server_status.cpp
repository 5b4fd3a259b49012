// Status and stop: what rank 0 reports of its ranks, and the way every live rank stops.
#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "ddstage/tool/store_cleanup.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

double tenths(double seconds) {
  return std::round(seconds * 10) / 10;
}

}  // namespace

StatusReply ServerRank::status() const {
  StatusReply reply;
  if (m_peers) {
    for (auto s : m_peers->silence_seconds()) reply.last_heard.push_back(tenths(s));
  }
  std::lock_guard lock(m_record_mutex);
  reply.memory_used = m_memory_used;
  return reply;
}

Message ServerRank::stop_request() {
  std::map<int, PartCommand> parts;
  std::vector<RankInfo> ranks;
  {
    std::lock_guard lock(m_descriptor_mutex);
    ranks = m_descriptor.ranks;
  }
  // Three heartbeats missed: a rank that is paused (SIGSTOP, a swapping node) or cut off would
  // take the connection, or not, and never answer. The others get as long to answer.
  const auto patience = 3 * heartbeat_interval(m_peer_timeout);
  const auto silent = m_peers->silent_for(patience);
  for (const auto& r : ranks) {
    if (!r.lost && r.rank != 0 && std::find(silent.begin(), silent.end(), r.rank) == silent.end())
      parts.emplace(r.rank, PartCommand{.op = "stop"});
  }
  const auto outcome = on_ranks(parts, patience);
  m_pending.clear();
  m_loaded.clear();
  sweep_dead_ranks(m_store_id);
  m_stopping = true;
  // Before the reply: once `ddstage stop` returns, the descriptor is gone.
  std::error_code ec;
  remove_descriptor_of(m_options.dir, m_store_id, ec);
  StopResult result{.stopped = {0}};
  for (const auto& [rank, reply] : outcome.replies) result.stopped.push_back(rank);
  const auto silence = m_peers->silence_seconds();
  for (const auto& r : ranks) {
    if (r.rank == 0 || outcome.replies.contains(r.rank)) continue;
    const auto heard = silence.at(static_cast<std::size_t>(r.rank));
    result.unreachable.push_back({r.rank, r.host, tenths(heard)});
    spdlog::warn(
        "stop: rank {} on {} (last heard {:.1f} s ago) {}", r.rank, r.host, heard,
        r.lost ? "was lost earlier" : "does not answer: it ends itself within peer_timeout");
    // Still running, maybe: a launcher that ends the job on a rank's failure ends it too.
    if (!r.lost) m_stopped_alone = true;
  }
  return stop_reply(result);
}

}  // namespace ddstage::detail
