// Rank 0's store.yaml: what the ranks told it at start-up and after each load, and which ranks
// are lost, written for clients to attach by.
#include <spdlog/spdlog.h>

#include "process.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {

void ServerRank::describe(const std::vector<RankStartup>& ranks) {
  m_descriptor.token = m_token;
  m_descriptor.id = m_store_id;
  m_descriptor.control = m_control->address();
  m_descriptor.started = utc_now();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    RankInfo info{.rank = static_cast<int>(r),
                  .host = ranks[r].host,
                  .pid = ranks[r].pid,
                  .transports = {"local", "shm"},
                  .memory_limit = ranks[r].memory_limit,
                  .control = ranks[r].control,
                  .tiers = ranks[r].tiers};
    if (const auto& fabric = ranks[r].fabric) {
      info.fabric_provider = fabric->provider;
      info.fabric_address = fabric->address_hex;
      info.transports.push_back("fabric");
    }
    m_descriptor.ranks.push_back(info);
  }
  m_memory_used.assign(ranks.size(), 0);
}

void ServerRank::publish_locked() {
  m_exit.unless_leaving([this] { m_descriptor.write(m_options.dir); });
}

void ServerRank::publish_dataset(StoreDataset dataset) {
  std::lock_guard lock(m_descriptor_mutex);
  std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == dataset.name; });
  m_descriptor.datasets.push_back(std::move(dataset));
  publish_locked();
}

void ServerRank::mark_lost(int rank, const std::string& why) {
  if (m_peers) m_peers->forget(rank);
  std::lock_guard lock(m_descriptor_mutex);
  auto& info = m_descriptor.ranks.at(static_cast<std::size_t>(rank));
  if (info.lost) return;
  info.lost = true;
  spdlog::warn(
      "lost {} ({}): the store goes on without it; `ddstage load --repair` restores "
      "the copies it held",
      rank_label(rank), why);
  try {
    publish_locked();
  } catch (const std::exception& e) {
    // The watch thread's caller has nowhere to go: the next publish writes the mark.
    spdlog::error("could not publish that rank {} is lost: {}", rank, e.what());
  }
  // Its memory, when it died on this node: readers skip it now.
  sweep_dead_ranks(m_store_id);
}

std::vector<std::string> ServerRank::live_hosts() const {
  std::lock_guard lock(m_descriptor_mutex);
  std::vector<std::string> hosts;
  for (const auto& r : m_descriptor.ranks) hosts.push_back(r.lost ? std::string() : r.host);
  return hosts;
}

}  // namespace ddstage::detail
