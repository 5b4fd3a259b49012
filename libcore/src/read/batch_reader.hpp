// The one batch reader: planning, transfer, host and device destinations, verify and profile,
// over a route table. Client readers and embedded Store readers are both this.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "batch_timer.hpp"
#include "ddstage/device_buffer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "gpu/gpu_destination.hpp"
#include "read/read_batch.hpp"
#include "read/reader_backend.hpp"
#include "read/route_table.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// How a reader gets its own instance of a transport: open_transport, or a test's stand-in.
using OpenTransport = std::unique_ptr<Transport> (*)(TransportId, const TransportTargets&,
                                                     const Settings&);

/// One per thread. Opens one transport per kind the routes use; scratch vectors are reused
/// across batches, so a warm reader allocates nothing per call.
class BatchReader final : public ReaderBackend {
 public:
  explicit BatchReader(std::shared_ptr<const RouteSource> source,
                       OpenTransport open = open_transport);
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;
  ~BatchReader() override;

  /// Total bytes of `field` for ids; UsageError for an unknown field or id.
  uint64_t batch_bytes(const std::string& field, std::span<const uint64_t> ids) const override;
  void row_sizes(const std::string& field, std::span<const uint64_t> ids,
                 std::span<uint64_t> sizes) const override;
  /// The rows of ids into dest (sized batch_bytes) in the order asked; with verify checked
  /// against the index's checksums.
  void get_batch(const std::string& field, std::span<const uint64_t> ids, std::span<std::byte> dest,
                 bool verify) override;
  /// The same into device memory, staged through a pinned buffer or copied straight from the
  /// mapped regions, by gpu.path.
  void get_batch(const std::string& field, std::span<const uint64_t> ids, const DeviceBuffer& dest,
                 bool verify) override;

 private:
  /// One transport and the reads planned for it this batch.
  struct Lane {
    TransportId id;
    std::unique_ptr<Transport> transport;
    std::vector<ReadOp> reads;
    bool copies;  // reads complete in post (memcpy): counted as copy time, not posting
  };
  static constexpr std::size_t max_lanes = 3;  // one per TransportId
  static constexpr uint8_t no_lane = 0xff;
  static constexpr uint32_t no_choice = 0xffffffff;
  // m_given_up: a rank read from, or given up on by an earlier batch (it may serve again when
  // its samples' other copy fails), or by the batch being read (not again in that batch).
  static constexpr uint8_t in_use = 0;
  static constexpr uint8_t given_up_before = 1;
  static constexpr uint8_t given_up_in_batch = 2;

  void open_lanes(OpenTransport open);
  /// The region to read stretch s from: the nearest live, reachable copy, readers spread over
  /// equally near ones (m_spread); a copy this reader gave up on only when no other is left.
  uint32_t choose(std::size_t s);
  /// Every touched region reachable and (served store) its rank still serving, before anything
  /// is read.
  void check_owners();
  [[noreturn]] void throw_unreachable(uint32_t region) const;
  /// Turns ids (checked) into reads at the caller's positions, noting the regions and ranks the
  /// batch touches; a run of consecutive samples of one region is one read (append_read). Reads
  /// nothing: check_owners comes next.
  void plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest);
  /// Runs one attempt at a batch (plan, check, move) until it succeeds; when it fails naming a
  /// rank whose every touched stretch has another live copy, gives that rank up for the rest of
  /// the batch and tries again. Rethrows anything else.
  void with_failover(const std::function<void()>& attempt);
  /// Has the owners of the batch's lazy regions stage what it reads there (m_staging).
  void stage_lazy();
  /// Whether stretch s has a live copy a transport reaches on a rank other than `rank` (one an
  /// earlier batch gave up on counting only with given_up_too; one this batch gave up, never).
  bool has_other_copy(std::size_t s, int rank, bool given_up_too) const;
  /// Before a replicated batch moves: network reads may stall failover_timeout when every
  /// stretch has another copy to go to, else read_timeout.
  void limit_silence();
  /// Whether `error` names a rank this reader can do without: then that rank is given up.
  bool give_up_on(const Error& error);
  /// Moves and verifies a planned batch in host memory.
  void transfer(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest,
                bool verify, BatchTimer& timer);
  /// Posts every lane (network reads first, so copies run while they are in flight), then
  /// completes them; every way out passes through the lanes' InFlight guards.
  void move_rows(BatchTimer& timer);
  /// Verify's reads of a block's rows, one stretch at a time: through the lanes into m_block
  /// (kept between batches, so a transport's registration of it stays valid), or from origin
  /// (m_origin) when no copy can be read (no route, every holder's process exited).
  FetchRows fetch_rows(BatchTimer& timer);
  /// The rank the current batch reads id from.
  int owner_of(uint64_t id);
  std::string why_not_direct() const;
  GpuDestination& gpu();

  std::shared_ptr<const RouteSource> m_source;
  const RouteTable& m_table;
  std::unique_ptr<RouteWatch> m_watch;
  std::array<Lane, max_lanes> m_lanes;
  std::size_t m_lane_count = 0;
  std::size_t m_copy_lane = max_lanes;    // the lane of mapped regions (shm), if any
  std::vector<uint8_t> m_lane_of;         // per region
  std::vector<uint8_t> m_touched;         // per region; all zero between batches
  std::vector<uint32_t> m_batch_regions;  // regions the current batch touches
  std::vector<uint8_t> m_rank_touched;    // per rank; all zero between batches
  std::vector<int> m_owners;              // ranks the current batch touches
  std::vector<std::size_t> m_stretches;   // stretches the current batch touches, in order met
  std::vector<uint32_t> m_choice;         // per stretch: the chosen region, or no_choice
  std::vector<uint8_t> m_given_up;        // per rank: in_use, given_up_before or _in_batch
  std::vector<int> m_given_up_in_batch;   // ranks given up by the batch being read
  std::size_t m_spread;                   // this reader's pick among equally near copies
  bool m_replicated = false;              // some stretch has several regions
  bool m_lazy = false;                    // some region is filled on first touch
  /// Per lazy region the batch touches: the ids it reads there (m_stage_slot: its entry + 1).
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> m_staging;
  std::size_t m_staging_used = 0;
  std::vector<uint32_t> m_stage_slot;  // per region
  std::optional<GpuDestination> m_gpu;
  std::vector<std::span<const std::byte>> m_regions;  // per rank, for direct device copies
  std::vector<std::byte> m_block;                     // a block verify reads
  const std::byte* m_block_registered = nullptr;
  std::unique_ptr<OriginReader> m_origin;  // opened by the first fetch_rows that needs it
};

}  // namespace ddstage::detail
