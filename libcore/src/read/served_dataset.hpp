// A dataset of a store served by `ddstage serve`, as its readers reach it: the routes a Client
// builds at open, and the watch over the server ranks' processes and segments that a served
// store needs and an embedded one does not.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "read/route_table.hpp"

namespace ddstage::detail {

/// One server rank as this process knows it, beside its regions' routes.
struct ServedRank {
  RankInfo info;
  bool on_this_host = false;
  FileDescriptor process;  // pidfd of the rank's process (this host), when the kernel gives one
};

/// What this process knows its readers may read of a lazy region without asking its rank:
/// shared by the dataset's readers (threads), so a sample is asked for once per process (or
/// a few times, by threads asking at once: its rank reads it from origin once either way).
class StagedSamples {
 public:
  explicit StagedSamples(ShardRange range)
      : m_range(range),
        m_bits(std::make_unique<std::atomic<uint64_t>[]>((range.count() + 63) / 64)) {}
  bool complete() const noexcept { return m_complete.load(std::memory_order_acquire); }
  bool has(uint64_t id) const noexcept {
    const uint64_t i = id - m_range.first;
    return (m_bits[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
  }
  void add(std::span<const uint64_t> ids) noexcept {
    for (uint64_t id : ids) {
      const uint64_t i = id - m_range.first;
      m_bits[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
    }
  }
  void set_complete() noexcept { m_complete.store(true, std::memory_order_release); }

 private:
  ShardRange m_range;
  std::unique_ptr<std::atomic<uint64_t>[]> m_bits;
  std::atomic<bool> m_complete{false};
};

/// One region as this process reads it.
struct ServedRegion {
  StoreRegion info;
  ShmSegment segment;  // mapped when read through shm, on this host, alive at open
  std::unique_ptr<StagedSamples> staged;  // lazy regions only

  bool mapped() const noexcept { return segment.bytes().data() != nullptr; }
};

/// Built by Client::open, read-only afterwards, so readers on many threads share it without a
/// lock.
struct ServedDataset final : RouteSource {
  ServedDataset(std::string name_, std::filesystem::path store_, Index index_,
                const StoreDataset& info);
  ServedDataset(const ServedDataset&) = delete;  // the table points into it
  ServedDataset& operator=(const ServedDataset&) = delete;

  const RouteTable& routes() const noexcept override { return table; }
  /// Watches the ranks' processes and segments for one reader.
  std::unique_ptr<RouteWatch> watch() const override;

  std::string name;
  std::filesystem::path store;  // the store directory, for error messages
  std::string token;            // for stage requests to the ranks of lazy regions
  Index index;
  std::vector<ServedRegion> regions;              // as store.yaml listed them at open
  Placement placement;                            // over regions
  std::vector<ShardLayout> layouts;               // by region, from the index
  std::vector<ServedRank> ranks;                  // by rank
  std::vector<std::vector<uint32_t>> regions_of;  // by rank
  RouteTable table;
};

/// Why `data` is no longer served as it was, from a fresh look at store.yaml; empty when the
/// store still lists every region the reader opened (a repair only adds some).
std::string why_withdrawn(const ServedDataset& data);

/// Why a rank whose process has exited cannot be read, and what to do: rank 0's loss ends the
/// store (restart it); another's samples come back with `load --repair` once the store has
/// marked it lost.
std::string rank_gone_message(const RankInfo& rank, const std::filesystem::path& store);

}  // namespace ddstage::detail
