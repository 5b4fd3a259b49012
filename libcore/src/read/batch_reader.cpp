#include "read/batch_reader.hpp"

#include <algorithm>
#include <chrono>

#include "read/read_batch.hpp"

namespace ddstage::detail {

BatchReader::BatchReader(std::shared_ptr<const RouteSource> source, OpenTransport open)
    : m_source(std::move(source)),
      m_table(m_source->routes()),
      m_watch(m_source->watch()),
      m_lane_of(m_table.routes.size(), no_lane),
      m_touched(m_table.routes.size()) {
  open_lanes(open);
}

BatchReader::~BatchReader() = default;

void BatchReader::open_lanes(OpenTransport open) {
  // Network transports first: their reads are posted before the copies, which then run while
  // those are in flight.
  for (const TransportId id : {TransportId::fabric, TransportId::mpi, TransportId::shm}) {
    const auto uses = [id](const Route& route) { return route.via == id; };
    if (std::none_of(m_table.routes.begin(), m_table.routes.end(), uses)) continue;
    const auto lane = static_cast<uint8_t>(m_lane_count++);
    m_lanes[lane] = {id, open(id, m_table.targets, m_table.settings), {}, id == TransportId::shm};
    if (id == TransportId::shm) m_copy_lane = lane;
    for (std::size_t r = 0; r < m_table.routes.size(); ++r) {
      if (uses(m_table.routes[r])) m_lane_of[r] = lane;
    }
  }
}

uint64_t BatchReader::batch_bytes(const std::string& field, std::span<const uint64_t> ids) const {
  const Index& index = *m_table.index;
  const uint32_t f = field_of(index, field);
  check_ids(index, ids);
  return bytes_of(index, f, ids);
}

void BatchReader::row_sizes(const std::string& field, std::span<const uint64_t> ids,
                            std::span<uint64_t> sizes) const {
  row_sizes_of(*m_table.index, field, ids, sizes);
}

void BatchReader::check_owners() {
  if (m_watch) m_watch->check(m_owners);
  for (int r : m_owners) {
    if (m_lane_of[r] == no_lane) throw_unreachable(r);
  }
}

void BatchReader::throw_unreachable(int rank) const {
  const Unreachable& u = m_table.routes[rank].unreachable;
  if (u.kind == ErrorKind::usage) throw UsageError(u.why, {.rank = rank});
  throw Error(u.kind, u.why, {.rank = rank});
}

void BatchReader::plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest) {
  for (std::size_t l = 0; l < m_lane_count; ++l) m_lanes[l].reads.clear();
  m_owners.clear();
  const Index& index = *m_table.index;
  const FieldInfo& info = index.fields()[field];
  const Route* route = nullptr;
  std::vector<ReadOp>* reads = nullptr;  // null for an unreachable rank: check_owners throws
  int rank = -1;
  for (uint64_t id : ids) {
    // Ids usually come in runs of one rank: look the owner up only when one leaves its range.
    if (!route || id < route->range.first || id >= route->range.last) {
      rank = m_table.plan->owner(id);
      route = &m_table.routes[rank];
      reads = m_lane_of[rank] == no_lane ? nullptr : &m_lanes[m_lane_of[rank]].reads;
      if (!m_touched[rank]) {
        m_touched[rank] = 1;
        m_owners.push_back(rank);
      }
    }
    const uint64_t bytes = info.variable ? index.entry(id, field).length : info.row_bytes;
    if (bytes == 0) continue;
    if (reads) append_read(*reads, {route->layout->row_offset(id, field), bytes, dest, rank});
    dest += bytes;
  }
  for (int r : m_owners) m_touched[r] = 0;
}

void BatchReader::move_rows(BatchTimer& timer) {
  std::array<std::optional<InFlight>, max_lanes> guards;
  for (std::size_t l = 0; l < m_lane_count; ++l) {
    Lane& lane = m_lanes[l];
    if (lane.reads.empty()) continue;
    timer.path(transport_entry(lane.id).name.data());  // a literal: the profile keeps the pointer
    guards[l].emplace(*lane.transport).post(lane.reads);
    if (lane.copies) guards[l]->complete();
    timer.mark(lane.copies ? ProfileStage::copy : ProfileStage::post);
  }
  for (std::size_t l = 0; l < m_lane_count; ++l) {
    if (!guards[l] || m_lanes[l].copies) continue;
    guards[l]->complete();
    timer.mark(ProfileStage::completion_wait);
  }
}

void BatchReader::transfer(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest,
                           bool verify, BatchTimer& timer) {
  const auto started = std::chrono::steady_clock::now();
  try {
    move_rows(timer);
  } catch (const Error& error) {
    if (m_watch) m_watch->explain(error, started);
    throw;
  }
  if (verify) {
    verify_rows(*m_table.index, *m_table.plan, field, ids, dest.data(), fetch_rows(timer));
    timer.mark(ProfileStage::other);  // not the GPU copy that may follow
  }
}

FetchRows BatchReader::fetch_rows(BatchTimer& timer) {
  return [this, &timer](uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest) {
    const int rank = m_table.plan->owner(ids.front());
    if (m_lane_of[rank] == no_lane || (m_watch && !m_watch->alive(rank))) {
      // Unverified, this rank's rows could not be read at all; origin still lets the block be
      // checked, under the store's freshness rule.
      if (!m_origin)
        m_origin = std::make_unique<OriginReader>(
            *m_table.index, OriginReaderOptions{.allow_stale = m_table.allow_stale});
      m_origin->read(field, ids, dest);
      return origin_source;
    }
    m_block.resize(dest.size());
    if (m_block.data() != m_block_registered) {
      // A transport may have registered the old buffer's memory under its address.
      for (std::size_t l = 0; l < m_lane_count; ++l) m_lanes[l].transport->forget_destinations();
      m_block_registered = m_block.data();
    }
    plan_reads(field, ids, m_block.data());
    check_owners();
    move_rows(timer);
    std::memcpy(dest.data(), m_block.data(), dest.size());
    return rank;
  };
}

void BatchReader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                            std::span<std::byte> dest, bool verify) {
  BatchTimer timer;
  const uint32_t f = check_batch(*m_table.index, field, ids, dest.size()).field;
  plan_reads(f, ids, dest.data());
  check_owners();
  timer.mark(ProfileStage::other);
  transfer(f, ids, dest, verify, timer);
  timer.finish(ids.size(), dest.size());
}

std::string BatchReader::why_not_direct() const {
  for (int r : m_owners) {
    if (!m_table.routes[r].why_not_direct.empty()) return m_table.routes[r].why_not_direct;
  }
  return {};
}

GpuDestination& BatchReader::gpu() {
  if (!m_gpu) {
    m_gpu.emplace(m_table.settings.get_string("gpu.path"));
    m_regions.reserve(m_table.routes.size());
    for (const Route& route : m_table.routes) m_regions.push_back(route.mapped);
  }
  return *m_gpu;
}

void BatchReader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                            const DeviceBuffer& dest, bool verify) {
  BatchTimer timer;
  const Index& index = *m_table.index;
  const uint32_t f = field_of(index, field);
  check_ids(index, ids);
  GpuDestination& device = gpu();
  device.begin(dest, bytes_of(index, f, ids));
  // Planned straight into dest first: that is the direct path's plan, and it finds the owners.
  plan_reads(f, ids, static_cast<std::byte*>(dest.ptr));
  check_owners();
  if (device.choose(why_not_direct()) == GpuPath::staged) {
    timer.path("gpu staged");
    bool replaced = false;
    const auto host = device.bounce(dest.bytes, &replaced);
    if (replaced) {
      for (std::size_t l = 0; l < m_lane_count; ++l) m_lanes[l].transport->forget_destinations();
    }
    plan_reads(f, ids, host.data());
    timer.mark(ProfileStage::other);
    transfer(f, ids, host, verify, timer);
    device.finish_staged(dest);
  } else {
    // Every rank of the batch is mapped (why_not_direct is empty), so its reads are all copies.
    timer.path("gpu direct");
    timer.mark(ProfileStage::other);
    const std::span<const ReadOp> reads = m_copy_lane < max_lanes
                                              ? std::span<const ReadOp>(m_lanes[m_copy_lane].reads)
                                              : std::span<const ReadOp>();
    device.copy_direct(reads, m_regions, dest);
    if (verify)
      verify_rows(index, *m_table.plan, f, ids, device.copy_back(dest).data(), fetch_rows(timer));
  }
  timer.finish(ids.size(), dest.bytes);
}

}  // namespace ddstage::detail
