// Status and stop: what rank 0 reports of its ranks, and the way every rank (or rank 0 alone,
// when others are silent) stops.
#include <cmath>
#include <thread>

#include <spdlog/spdlog.h>

#include "ddstage/tool/store_cleanup.hpp"
#include "mpi/mpi_exchange.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

double tenths(double seconds) {
  return std::round(seconds * 10) / 10;
}

}  // namespace

void ServerRank::record_memory() {
  uint64_t used = 0;
  for (const auto& [n, shard] : m_loaded) used += shard.segment.bytes().size();
  auto used_by_rank = gather(used, comm());
  if (!is_root()) return;
  std::lock_guard lock(m_record_mutex);
  m_memory_used = std::move(used_by_rank);
}

StatusReply ServerRank::status() const {
  StatusReply reply;
  if (m_peers) {
    for (auto s : m_peers->silence_seconds()) reply.last_heard.push_back(tenths(s));
  }
  std::lock_guard lock(m_record_mutex);
  reply.memory_used = m_memory_used;
  return reply;
}

Message ServerRank::stop() {
  m_loaded.clear();
  m_stopping = true;
  const auto acknowledged = gather(m_mpi.rank(), comm());
  if (!is_root()) return {};
  // Before the reply: once `ddstage stop` returns, the descriptor is gone.
  std::error_code ec;
  remove_descriptor_of(m_options.dir, m_store_id, ec);
  return stop_reply({.stopped = acknowledged});
}

Message ServerRank::stop_request() {
  // The watch goes on: should a rank die during the stop's collectives, it still ends rank 0.
  // Three heartbeats missed: a collective would wait on that rank until the watchdog fired. A
  // rank that was only paused (SIGSTOP, a swapping node) beats again as soon as it runs: it
  // gets one more interval.
  const auto interval = heartbeat_interval(m_peer_timeout);
  auto silent = m_peers->silent_for(3 * interval);
  for (const auto until = std::chrono::steady_clock::now() + interval;
       !silent.empty() && std::chrono::steady_clock::now() < until;
       silent = m_peers->silent_for(3 * interval)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (silent.empty()) {
    const ControlCommand command{.op = "stop"};
    broadcast(command, comm());
    return execute(command);
  }
  m_loaded.clear();
  std::error_code ec;
  remove_descriptor_of(m_options.dir, m_store_id, ec);
  StopResult result{.stopped = {0}};
  const auto silence = m_peers->silence_seconds();
  for (int r : silent) {
    const auto i = static_cast<std::size_t>(r);
    result.unreachable.push_back({r, m_descriptor.ranks.at(i).host, tenths(silence.at(i))});
    spdlog::warn(
        "stop: rank {} on {} not heard for {:.1f} s: stopping this rank alone; it ends itself "
        "within "
        "peer_timeout",
        r, m_descriptor.ranks.at(i).host, silence.at(i));
  }
  m_stopping = true;
  m_stopped_alone = true;
  return stop_reply(result);
}

}  // namespace ddstage::detail
