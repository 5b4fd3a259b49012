#include "read/batch_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "read/read_batch.hpp"

namespace ddstage::detail {

BatchReader::BatchReader(std::shared_ptr<const RouteSource> source, OpenTransport open)
    : m_source(std::move(source)),
      m_table(m_source->routes()),
      m_watch(m_source->watch()),
      m_lane_of(m_table.routes.size(), no_lane),
      m_touched(m_table.routes.size()),
      m_rank_touched(static_cast<std::size_t>(m_table.ranks)),
      m_choice(m_table.placement->stretches(), no_choice),
      m_given_up(static_cast<std::size_t>(m_table.ranks)),
      // Readers of one process take turns; processes differ by pid: a DataLoader's workers
      // spread over the copies as its threads do.
      m_spread(std::hash<std::thread::id>{}(std::this_thread::get_id()) ^
               static_cast<std::size_t>(::getpid()) * 0x9e3779b97f4a7c15ull) {
  for (std::size_t s = 0; s < m_table.placement->stretches(); ++s)
    m_replicated = m_replicated || m_table.placement->holders(s).size() > 1;
  for (const Route& route : m_table.routes) m_lazy = m_lazy || route.lazy;
  if (m_lazy) m_stage_slot.assign(m_table.routes.size(), 0);
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

uint32_t BatchReader::choose(std::size_t s) {
  if (m_choice[s] != no_choice) return m_choice[s];
  const auto holders = m_table.placement->holders(s);
  // Usable: a transport reaches it and its rank was not given up; among those, the nearest,
  // and among equally near ones this reader's turn. None usable: the first holder, whose
  // check throws why it cannot be read.
  int best_distance = 0;
  std::size_t usable = 0;
  for (uint32_t g : holders) {
    const Route& route = m_table.routes[g];
    if (m_lane_of[g] == no_lane || m_given_up[static_cast<std::size_t>(route.rank)]) continue;
    if (usable == 0 || route.distance < best_distance) {
      best_distance = route.distance;
      usable = 0;
    }
    if (route.distance == best_distance) ++usable;
  }
  // None usable: a copy given up on that a transport still reaches, before one none does.
  uint32_t chosen = holders.front();
  for (uint32_t g : holders) {
    if (m_lane_of[g] != no_lane) {
      chosen = g;
      break;
    }
  }
  if (usable != 0) {
    std::size_t turn = (m_spread + s) % usable;
    for (uint32_t g : holders) {
      const Route& route = m_table.routes[g];
      if (m_lane_of[g] == no_lane || m_given_up[static_cast<std::size_t>(route.rank)] ||
          route.distance != best_distance)
        continue;
      if (turn-- == 0) {
        chosen = g;
        break;
      }
    }
  }
  m_choice[s] = chosen;
  return chosen;
}

void BatchReader::check_owners() {
  if (m_watch) m_watch->check(m_owners);
  for (uint32_t g : m_batch_regions) {
    if (m_lane_of[g] == no_lane) throw_unreachable(g);
  }
  stage_lazy();
  limit_silence();
}

void BatchReader::throw_unreachable(uint32_t region) const {
  const Route& route = m_table.routes[region];
  const Unreachable& u = route.unreachable;
  if (u.kind == ErrorKind::usage) throw UsageError(u.why, {.rank = route.rank});
  throw Error(u.kind, u.why, {.rank = route.rank});
}

void BatchReader::plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest) {
  for (std::size_t l = 0; l < m_lane_count; ++l) m_lanes[l].reads.clear();
  m_batch_regions.clear();
  m_owners.clear();
  m_stretches.clear();
  m_staging_used = 0;
  const Index& index = *m_table.index;
  const Placement& placement = *m_table.placement;
  const FieldInfo& info = index.fields()[field];
  ShardRange stretch;  // empty: no stretch yet
  const Route* route = nullptr;
  std::vector<ReadOp>* reads = nullptr;  // null for an unreachable region: check_owners throws
  uint32_t region = 0;
  for (uint64_t id : ids) {
    // Ids usually come in runs of one stretch: look the holder up only when one leaves it.
    if (id < stretch.first || id >= stretch.last) {
      const std::size_t s = placement.stretch_of(id);
      stretch = placement.stretch(s);
      region = choose(s);
      route = &m_table.routes[region];
      reads = m_lane_of[region] == no_lane ? nullptr : &m_lanes[m_lane_of[region]].reads;
      if (m_replicated) m_stretches.push_back(s);
      if (!m_touched[region]) {
        m_touched[region] = 1;
        m_batch_regions.push_back(region);
      }
      const auto r = static_cast<std::size_t>(route->rank);
      if (!m_rank_touched[r]) {
        m_rank_touched[r] = 1;
        m_owners.push_back(route->rank);
      }
    }
    if (m_lazy && route->lazy) {
      uint32_t& slot = m_stage_slot[region];
      if (slot == 0) {
        if (m_staging_used == m_staging.size()) m_staging.emplace_back();
        m_staging[m_staging_used].first = region;
        m_staging[m_staging_used].second.clear();
        slot = static_cast<uint32_t>(++m_staging_used);
      }
      m_staging[slot - 1].second.push_back(id);
    }
    const uint64_t bytes = info.variable ? index.entry(id, field).length : info.row_bytes;
    if (bytes == 0) continue;
    if (reads)
      append_read(*reads,
                  {route->layout->row_offset(id, field), bytes, dest, static_cast<int>(region)});
    dest += bytes;
  }
  for (uint32_t g : m_batch_regions) m_touched[g] = 0;
  for (int r : m_owners) m_rank_touched[static_cast<std::size_t>(r)] = 0;
  for (std::size_t i = 0; i < m_staging_used; ++i) m_stage_slot[m_staging[i].first] = 0;
}

void BatchReader::stage_lazy() {
  for (std::size_t i = 0; i < m_staging_used; ++i) {
    auto& [region, ids] = m_staging[i];
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (m_watch) m_watch->stage(region, ids);
  }
}

bool BatchReader::has_other_copy(std::size_t s, int rank, bool given_up_too) const {
  const auto holders = m_table.placement->holders(s);
  return std::any_of(holders.begin(), holders.end(), [&](uint32_t g) {
    const int r = m_table.routes[g].rank;
    const uint8_t state = m_given_up[static_cast<std::size_t>(r)];
    return r != rank && m_lane_of[g] != no_lane &&
           (given_up_too ? state != given_up_in_batch : state == in_use) &&
           (!m_watch || m_watch->alive(r));
  });
}

bool BatchReader::give_up_on(const Error& error) {
  const auto rank = error.context().rank;
  if (!m_replicated || !rank || error.kind() == ErrorKind::usage || *rank < 0 ||
      *rank >= m_table.ranks)
    return false;
  // Only when every stretch the batch read from that rank has another copy to go to: a live one
  // not given up, or else one an earlier batch gave up (a stall then), which gets another chance.
  // One given up during this batch gets none: two stalled copies would take turns for ever.
  std::vector<int> revived;
  for (std::size_t s : m_stretches) {
    if (m_table.routes[m_choice[s]].rank != *rank || has_other_copy(s, *rank, false)) continue;
    if (!has_other_copy(s, *rank, true)) return false;
    for (uint32_t g : m_table.placement->holders(s)) {
      const int r = m_table.routes[g].rank;
      if (r != *rank && m_lane_of[g] != no_lane &&
          m_given_up[static_cast<std::size_t>(r)] == given_up_before)
        revived.push_back(r);
    }
  }
  m_given_up[static_cast<std::size_t>(*rank)] = given_up_in_batch;
  m_given_up_in_batch.push_back(*rank);
  for (int r : revived) m_given_up[static_cast<std::size_t>(r)] = in_use;
  std::fill(m_choice.begin(), m_choice.end(), no_choice);
  return true;
}

void BatchReader::limit_silence() {
  if (!m_replicated) return;  // the transports' own read_timeout, as opened
  // A rank that stalls costs failover_timeout only while the batch has somewhere else to go.
  const bool elsewhere = std::all_of(m_stretches.begin(), m_stretches.end(), [&](std::size_t s) {
    return has_other_copy(s, m_table.routes[m_choice[s]].rank, true);
  });
  const auto failover = m_table.settings.get_duration("failover_timeout");
  const auto read_timeout = m_table.settings.get_duration("read_timeout");
  const bool sooner = elsewhere && failover < read_timeout;
  for (std::size_t l = 0; l < m_lane_count; ++l) {
    if (m_lanes[l].copies) continue;
    m_lanes[l].transport->limit_silence(sooner ? failover : read_timeout,
                                        sooner ? "failover_timeout" : "read_timeout");
  }
}

void BatchReader::with_failover(const std::function<void()>& attempt) {
  // Not a deadline since the batch's start: reads that progress, however slowly (a loaded node,
  // a large batch), must not use up a stalled rank's way to its other copy. Each attempt is bounded
  // by its transports' silence limit, and each failover gives up a rank for the rest of the
  // batch.
  for (int r : m_given_up_in_batch) m_given_up[static_cast<std::size_t>(r)] = given_up_before;
  m_given_up_in_batch.clear();
  for (;;) {
    try {
      attempt();
      return;
    } catch (const Error& error) {
      if (!give_up_on(error)) throw;
      spdlog::warn("{}: reading its samples from other copies from now on", error.what());
    }
  }
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
    verify_rows(
        *m_table.index, *m_table.placement, [this](uint64_t id) { return owner_of(id); }, field,
        ids, dest.data(), fetch_rows(timer));
    timer.mark(ProfileStage::other);  // not the GPU copy that may follow
  }
}

int BatchReader::owner_of(uint64_t id) {
  return m_table.routes[choose(m_table.placement->stretch_of(id))].rank;
}

FetchRows BatchReader::fetch_rows(BatchTimer& timer) {
  return [this, &timer](uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest) {
    const std::size_t s = m_table.placement->stretch_of(ids.front());
    uint32_t region = choose(s);
    if (m_watch && !m_watch->alive(m_table.routes[region].rank) &&
        has_other_copy(s, m_table.routes[region].rank, true)) {
      // Its process exited since it was chosen: another copy, not origin, gives the block.
      m_given_up[static_cast<std::size_t>(m_table.routes[region].rank)] = given_up_before;
      std::fill(m_choice.begin(), m_choice.end(), no_choice);
      region = choose(s);
    }
    const int rank = m_table.routes[region].rank;
    if (m_lane_of[region] == no_lane || (m_watch && !m_watch->alive(rank))) {
      // Unverified, these rows could not be read at all; origin still lets the block be
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
  with_failover([&] {
    plan_reads(f, ids, dest.data());
    check_owners();
    timer.mark(ProfileStage::other);
    transfer(f, ids, dest, verify, timer);
  });
  timer.finish(ids.size(), dest.size());
}

std::string BatchReader::why_not_direct() const {
  for (uint32_t g : m_batch_regions) {
    if (!m_table.routes[g].why_not_direct.empty()) return m_table.routes[g].why_not_direct;
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
  with_failover([&] {
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
      // Every region of the batch is mapped (why_not_direct is empty), so its reads are all
      // copies.
      timer.path("gpu direct");
      timer.mark(ProfileStage::other);
      const std::span<const ReadOp> reads =
          m_copy_lane < max_lanes ? std::span<const ReadOp>(m_lanes[m_copy_lane].reads)
                                  : std::span<const ReadOp>();
      device.copy_direct(reads, m_regions, dest);
      if (verify)
        verify_rows(
            index, *m_table.placement, [this](uint64_t id) { return owner_of(id); }, f, ids,
            device.copy_back(dest).data(), fetch_rows(timer));
    }
  });
  timer.finish(ids.size(), dest.bytes);
}

}  // namespace ddstage::detail
