#include "ddstage/client.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "process.hpp"
#include "rank_lock.hpp"
#include "read/batch_reader.hpp"
#include "read/served_dataset.hpp"

namespace ddstage {
namespace detail {
namespace {

/// The store's regions must be the ones the index describes, or rows would be looked for in
/// the wrong place. (StoreDescriptor::read already checked every region's rank.)
void check_dataset(const StoreDescriptor& store, const StoreDataset& info, const Index& index) {
  for (std::size_t r = 0; r < store.ranks.size(); ++r) {
    if (store.ranks[r].rank != static_cast<int>(r)) {
      throw IndexError(
          fmt::format("store.yaml lists rank {} in position {}", store.ranks[r].rank, r));
    }
  }
  if (index.fingerprint() != info.index_fingerprint) {
    throw IndexError(
        fmt::format("the index {} changed after dataset '{}' was loaded into the store; "
                    "reload it (`ddstage load --replace`)",
                    info.index.string(), info.name));
  }
  for (const auto& g : info.regions) {
    if (g.last > index.samples()) {
      throw IndexError(
          fmt::format("the store holds samples up to {} of dataset '{}' (rank {}), but its index "
                      "{} has {}; reload the dataset",
                      g.last, info.name, g.rank, info.index.string(), index.samples()));
    }
  }
}

/// Whether a rank is read over libfabric under the `transport` choice: fabric reads every rank
/// that serves over it, auto (nullopt) those on other hosts, shm none.
bool reads_via_fabric(const RankInfo& rank, const StoreRegion& region,
                      std::optional<TransportId> transport, bool on_this_host) {
  if (rank.fabric_address.empty() || !region.fabric) return false;
  return transport == TransportId::fabric || (!transport && !on_this_host);
}

/// Region g's route over libfabric: its rank's endpoint and the region's registration.
void route_via_fabric(ServedDataset& data, uint32_t g, const RankInfo& rank) {
  const StoreRegion& info = data.regions[g].info;
  Route& route = data.table.routes[g];
  route.via = TransportId::fabric;
  route.distance = 1;
  route.why_not_direct = fmt::format(
      "rank {} on {} is read over libfabric ({}), and ddstage does not yet register device memory "
      "with FI_HMEM",
      rank.rank, rank.host, rank.fabric_provider);
  data.table.targets.remotes[g] = {
      {rank.fabric_provider, rank.fabric_address},
      {info.fabric_key, info.fabric_base, data.layouts[g].total_bytes()},
      rank.host,
      rank.rank};
}

/// Maps region g read-only and routes it through shm. false when its segment is gone or going:
/// the dataset is being replaced (or unloaded).
bool route_via_shm(ServedDataset& data, uint32_t g) {
  ServedRegion& region = data.regions[g];
  const StoreRegion& info = region.info;
  auto segment = ShmSegment::try_open_read_only(info.segment);
  if (!segment || segment->unlinked()) return false;
  region.segment = std::move(*segment);
  const auto bytes = region.segment.bytes();
  // Rows are found by the layout computed from the index; the region must hold all of it (and
  // be a shard of this range: ShardView checks the header), so no read leaves the mapping.
  const uint64_t need = std::max(info.bytes, data.layouts[g].total_bytes());
  if (bytes.size() < need) {
    throw IndexError(
        fmt::format("shared memory {} of dataset '{}' holds {} bytes; it should hold {}",
                    info.segment, data.name, bytes.size(), need),
        {.rank = info.rank});
  }
  (void)ShardView(bytes, static_cast<uint32_t>(data.index.fields().size()),
                  data.layouts[g].range());
  Route& route = data.table.routes[g];
  route.via = TransportId::shm;
  route.distance = 0;
  route.mapped = bytes;
  data.table.targets.mapped[g] = bytes;
  if (ShmSegment::is_file(info.segment)) data.table.targets.files[g] = &region.segment.file();
  return true;
}

/// The rank's process handle when it runs on this host and is alive.
ServedRank watch_rank(const RankInfo& rank, const std::string& here) {
  ServedRank served{.info = rank, .on_this_host = rank.host == here};
  if (!served.on_this_host || rank.lost || !process_alive(rank.pid)) return served;
  // A pidfd polls readable once the process exits (zombie or reaped) and never follows a
  // reused pid: one poll() per batch checks every rank it touches. Without one (old kernel,
  // seccomp) reads fall back to process_alive.
  // (The raw syscall: Debian 12's <sys/pidfd.h> lacks C linkage for C++.)
  if (auto fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(rank.pid), 0u); fd >= 0) {
    served.process =
        FileDescriptor(static_cast<int>(fd), "pidfd of rank " + std::to_string(rank.rank));
  }
  return served;
}

/// Region g's route. A region of a dead or lost rank stays unreachable, so reads that need it
/// (and no other copy) fail naming it while other samples still read. false when its segment
/// is gone or going.
bool attach_region(ServedDataset& data, uint32_t g, std::optional<TransportId> transport) {
  const StoreRegion& info = data.regions[g].info;
  const ServedRank& served = data.ranks[static_cast<std::size_t>(info.rank)];
  const RankInfo& rank = served.info;
  Route& route = data.table.routes[g];
  route = {.range = {info.first, info.last},
           .rank = info.rank,
           .layout = &data.layouts[g],
           .lazy = info.lazy};
  if (rank.lost) {
    route.unreachable = {
        ErrorKind::runtime,
        fmt::format("rank {} on {} was lost (the store at {} marked it so): its samples have no "
                    "other live copy; `ddstage load --repair` restores them",
                    rank.rank, rank.host, data.store.string())};
    return true;
  }
  if (info.lazy && rank.control.empty()) {
    route.unreachable = {ErrorKind::runtime,
                         fmt::format("rank {} on {} holds a lazily staged region but publishes no "
                                     "control address to ask it to stage samples",
                                     rank.rank, rank.host)};
    return true;
  }
  const bool via_fabric = reads_via_fabric(rank, info, transport, served.on_this_host);
  if (via_fabric) route_via_fabric(data, g, rank);
  if (!served.on_this_host) {
    route.unreachable = {
        ErrorKind::usage,
        fmt::format("rank {} on {} is on another node and this client reads only shared memory: "
                    "serve with --transport fabric (auto does on several hosts) and read with "
                    "transport auto or fabric",
                    rank.rank, rank.host)};
    return true;
  }
  route.unreachable = {ErrorKind::runtime, rank_gone_message(rank, data.store)};
  if (!served.process && !process_alive(rank.pid)) return true;
  return via_fabric || route_via_shm(data, g);
}

/// Routes every region of the dataset; the region whose segment is gone or going, if any.
std::optional<uint32_t> attach_regions(ServedDataset& data, const StoreDescriptor& store,
                                       const Settings& settings) {
  static constexpr std::array allowed{TransportId::shm, TransportId::fabric};
  const auto transport =
      parse_transport(settings.get_string("transport"), allowed, true, "transport");
  const bool fabric = std::all_of(data.regions.begin(), data.regions.end(),
                                  [](const ServedRegion& g) { return g.info.fabric; });
  if (transport == TransportId::fabric && !fabric) {
    throw UsageError(
        fmt::format("transport fabric: the store at {} does not serve over libfabric "
                    "(start it with `ddstage serve --transport fabric`)",
                    data.store.string()));
  }
  const std::size_t n = data.regions.size();
  data.table.settings = settings;
  data.table.allow_stale = settings.get_bool("origin.allow_stale");
  data.table.ranks = static_cast<int>(store.ranks.size());
  data.table.routes.resize(n);
  data.table.targets.mapped.resize(n);
  data.table.targets.files.resize(n, nullptr);
  data.table.targets.remotes.resize(n);
  data.layouts.reserve(n);
  for (const auto& g : data.regions)
    data.layouts.emplace_back(data.index, ShardRange{g.info.first, g.info.last});
  const std::string here = host_name();
  data.ranks.reserve(store.ranks.size());
  data.regions_of.resize(store.ranks.size());
  for (const RankInfo& rank : store.ranks) data.ranks.push_back(watch_rank(rank, here));
  for (uint32_t g = 0; g < n; ++g) {
    data.regions_of[static_cast<std::size_t>(data.regions[g].info.rank)].push_back(g);
    if (!attach_region(data, g, transport)) return g;
  }
  return std::nullopt;
}

}  // namespace
}  // namespace detail

Dataset::Dataset(std::shared_ptr<const detail::ServedDataset> data) : m(std::move(data)) {}
Dataset::Dataset(Dataset&&) noexcept = default;
Dataset& Dataset::operator=(Dataset&&) noexcept = default;
Dataset::~Dataset() = default;

const Index& Dataset::index() const noexcept {
  return m->index;
}
const std::string& Dataset::name() const noexcept {
  return m->name;
}
Reader Dataset::reader() const {
  return Reader(std::make_unique<detail::BatchReader>(m));
}

Client::Client(const std::filesystem::path& dir, Settings settings)
    : m_dir(dir), m_descriptor(StoreDescriptor::read(dir)), m_settings(std::move(settings)) {
  profile::configure(m_settings.get_string("profile"));
  // read() guarantees at least one rank. Without a fabric or control round trip only a
  // rank 0 on this host can be checked; a remote one is trusted until a read needs it.
  // The rank lock proves it; a pid alone could have been reused.
  const RankInfo& root = m_descriptor.ranks.front();
  const bool gone = m_descriptor.id.empty()
                        ? !detail::process_alive(root.pid)
                        : detail::rank_presence(m_descriptor.id, 0) != detail::RankPresence::live;
  if (root.host == detail::host_name() && gone) {
    throw UsageError(fmt::format(
        "the store at {} is not running (rank 0, pid {} on {}, is gone); `ddstage stop --store {}` "
        "removes what it left",
        dir.string(), root.pid, root.host, dir.string()));
  }
}

Dataset Client::open(const std::string& name) const {
  // Read afresh: a load or replace since this client was made changed names and keys. A replace
  // unlinks each rank's old segment before rank 0 publishes the new names: a segment that is
  // gone or going means another look at store.yaml, until read_timeout has passed.
  const auto deadline = std::chrono::steady_clock::now() + m_settings.get_duration("read_timeout");
  StoreDescriptor store = StoreDescriptor::read(m_dir);
  for (;;) {
    const StoreDataset& info = store.dataset(name);
    auto index = Index::open(info.index);
    detail::check_dataset(store, info, index);
    auto state = std::make_shared<detail::ServedDataset>(name, m_dir, std::move(index), info);
    state->token = store.token;
    const auto missing = detail::attach_regions(*state, store, m_settings);
    if (!missing) return Dataset(std::move(state));
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(
          ErrorKind::runtime,
          fmt::format(
              "dataset '{}' is being replaced (or unloaded) in the store at {}: rank {}'s shared "
              "memory {} is gone and store.yaml named no new one within {} ms (read_timeout); "
              "open it again",
              name, m_dir.string(), info.regions[*missing].rank, info.regions[*missing].segment,
              m_settings.get_duration("read_timeout").count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!std::filesystem::exists(StoreDescriptor::path_in(m_dir))) {
      throw Error(ErrorKind::runtime,
                  fmt::format("the store at {} is not running any more: it stopped while "
                              "dataset '{}' was being opened",
                              m_dir.string(), name));
    }
    store = StoreDescriptor::read(m_dir);
  }
}

}  // namespace ddstage
