// Rank 0's store.yaml: what the ranks told it at start-up and after each load, written for
// clients to attach by.
#include "process.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {

void ServerRank::describe(const std::vector<RankStartup>& ranks) {
  m_descriptor.id = m_store_id;
  m_descriptor.control = m_control->address();
  m_descriptor.started = utc_now();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    RankInfo info{.rank = static_cast<int>(r),
                  .host = ranks[r].host,
                  .pid = ranks[r].pid,
                  .transports = {"local", "shm"},
                  .memory_limit = ranks[r].memory_limit};
    if (const auto& fabric = ranks[r].fabric) {
      info.fabric_provider = fabric->provider;
      info.fabric_address = fabric->address_hex;
      info.transports.push_back("fabric");
    }
    m_descriptor.ranks.push_back(info);
  }
}

void ServerRank::publish() {
  m_exit.unless_leaving([this] { m_descriptor.write(m_options.dir); });
}

void ServerRank::publish_dataset(const LoadPlan& plan, const std::filesystem::path& index,
                                 const std::vector<PublishedShard>& shards) {
  StoreDataset ds{.name = plan.name,
                  .index = std::filesystem::absolute(index),
                  .index_fingerprint = plan.index.fingerprint()};
  const auto boundaries = ShardPlan::balance(plan.index, m_mpi.size()).boundaries();
  for (std::size_t r = 0; r < shards.size(); ++r) {
    const auto& shard = shards[r];
    StoreRegion region{.rank = static_cast<int>(r),
                       .first = boundaries[r],
                       .last = boundaries[r + 1],
                       .segment = shard.segment,
                       .bytes = shard.region_bytes};
    if (shard.fabric) {
      region.fabric = true;
      region.fabric_key = shard.fabric->key;
      region.fabric_base = shard.fabric->base;
    }
    ds.regions.push_back(std::move(region));
  }
  std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == plan.name; });
  m_descriptor.datasets.push_back(ds);
  publish();
}

}  // namespace ddstage::detail
