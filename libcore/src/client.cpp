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

/// The store's plan must be the one the index describes, or rows would be looked for in the
/// wrong region. (StoreDescriptor::read already checked one shard per rank in every list.)
void check_plan(const StoreDescriptor& store, const StoreDataset& info, const Index& index,
                const ShardPlan& plan) {
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
  if (plan.samples() != index.samples()) {
    throw IndexError(
        fmt::format("the store holds {} samples of dataset '{}', but its index {} has {}; "
                    "reload the dataset",
                    plan.samples(), info.name, info.index.string(), index.samples()));
  }
}

/// Whether rank is read over libfabric under the `transport` choice: fabric reads every rank
/// that serves over it, auto (nullopt) those on other hosts, shm none.
bool reads_via_fabric(const RankInfo& rank, const StoreDataset& info,
                      std::optional<TransportId> transport, bool on_this_host) {
  if (rank.fabric_address.empty() || info.fabric_keys.empty()) return false;
  return transport == TransportId::fabric || (!transport && !on_this_host);
}

/// Rank r's route over libfabric: its endpoint and registered region.
void route_via_fabric(ServedDataset& data, const StoreDataset& info, const RankInfo& rank) {
  const auto r = static_cast<std::size_t>(rank.rank);
  Route& route = data.table.routes[r];
  route.via = TransportId::fabric;
  route.why_not_direct = fmt::format(
      "rank {} on {} is read over libfabric ({}), and ddstage does not yet register device memory "
      "with FI_HMEM",
      rank.rank, rank.host, rank.fabric_provider);
  data.table.targets.remotes[r] = {
      {rank.fabric_provider, rank.fabric_address},
      {info.fabric_keys[r], info.fabric_bases[r], data.layouts[r].total_bytes()},
      rank.host};
}

/// Maps rank r's segment read-only and routes it through shm. false when the live rank's
/// segment is gone or going: the dataset is being replaced (or unloaded).
bool route_via_shm(ServedDataset& data, const StoreDataset& info, int r) {
  const auto i = static_cast<std::size_t>(r);
  ServedRank& rank = data.ranks[i];
  auto segment = ShmSegment::try_open_read_only(info.segments[i]);
  if (!segment || segment->unlinked()) return false;
  rank.segment = std::move(*segment);
  const auto region = rank.segment.bytes();
  // Rows are found by the layout computed from the index; the region must hold all of it (and
  // be a shard of this range: ShardView checks the header), so no read leaves the mapping.
  const uint64_t need = std::max(info.region_bytes[i], data.layouts[i].total_bytes());
  if (region.size() < need) {
    throw IndexError(
        fmt::format("shared memory {} of dataset '{}' holds {} bytes; it should hold {}",
                    info.segments[i], info.name, region.size(), need),
        {.rank = r});
  }
  (void)ShardView(region, static_cast<uint32_t>(data.index.fields().size()),
                  data.layouts[i].range());
  Route& route = data.table.routes[i];
  route.via = TransportId::shm;
  route.mapped = region;
  data.table.targets.mapped[i] = region;
  return true;
}

/// Rank's route, and its process handle when it runs on this host. A dead rank stays
/// unreachable, so reads of its samples fail naming it while the other ranks' samples still
/// read. false when its segment is gone or going.
bool attach_rank(ServedDataset& data, const StoreDataset& info, const RankInfo& rank,
                 const std::string& here, std::optional<TransportId> transport) {
  const int r = rank.rank;
  ServedRank& served =
      data.ranks.emplace_back(ServedRank{.info = rank, .on_this_host = rank.host == here});
  Route& route = data.table.routes[static_cast<std::size_t>(r)];
  route = {.range = data.plan.range(r), .layout = &data.layouts[static_cast<std::size_t>(r)]};
  const bool via_fabric = reads_via_fabric(rank, info, transport, served.on_this_host);
  if (via_fabric) route_via_fabric(data, info, rank);
  if (!served.on_this_host) {
    route.unreachable = {
        ErrorKind::usage,
        fmt::format("rank {} on {} is on another node and this client reads only shared memory: "
                    "serve with --transport fabric (auto does on several hosts) and read with "
                    "transport auto or fabric",
                    r, rank.host)};
    return true;
  }
  route.unreachable = {
      ErrorKind::runtime,
      fmt::format("rank {} (pid {} on {}) is gone: its process has exited; restart the store at {}",
                  r, rank.pid, rank.host, data.store.string())};
  if (!process_alive(rank.pid)) return true;
  // A pidfd polls readable once the process exits (zombie or reaped) and never follows a
  // reused pid: one poll() per batch checks every rank it touches. Without one (old kernel,
  // seccomp) reads fall back to process_alive.
  // (The raw syscall: Debian 12's <sys/pidfd.h> lacks C linkage for C++.)
  if (auto fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(rank.pid), 0u); fd >= 0) {
    served.process = FileDescriptor(static_cast<int>(fd), "pidfd of rank " + std::to_string(r));
  }
  return via_fabric || route_via_shm(data, info, r);
}

/// Routes every rank of the dataset; the rank whose segment is gone or going, if any.
std::optional<int> attach_ranks(ServedDataset& data, const StoreDescriptor& store,
                                const StoreDataset& info, const Settings& settings) {
  static constexpr std::array allowed{TransportId::shm, TransportId::fabric};
  const auto transport =
      parse_transport(settings.get_string("transport"), allowed, true, "transport");
  if (transport == TransportId::fabric && info.fabric_keys.empty()) {
    throw UsageError(
        fmt::format("transport fabric: the store at {} does not serve over libfabric "
                    "(start it with `ddstage serve --transport fabric`)",
                    data.store.string()));
  }
  const std::size_t n = store.ranks.size();
  data.table.settings = settings;
  data.table.allow_stale = settings.get_bool("origin.allow_stale");
  data.table.routes.resize(n);
  data.table.targets.mapped.resize(n);
  data.table.targets.remotes.resize(n);
  data.layouts.reserve(n);
  for (std::size_t r = 0; r < n; ++r)
    data.layouts.emplace_back(data.index, data.plan.range(static_cast<int>(r)));
  data.ranks.reserve(n);
  const std::string here = host_name();
  for (const RankInfo& rank : store.ranks) {
    if (!attach_rank(data, info, rank, here, transport)) return rank.rank;
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
    auto plan = ShardPlan::from_boundaries(info.boundaries);
    detail::check_plan(store, info, index, plan);
    auto state =
        std::make_shared<detail::ServedDataset>(name, m_dir, std::move(index), std::move(plan));
    state->segments = info.segments;
    const auto missing = detail::attach_ranks(*state, store, info, m_settings);
    if (!missing) return Dataset(std::move(state));
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(
          ErrorKind::runtime,
          fmt::format(
              "dataset '{}' is being replaced (or unloaded) in the store at {}: rank {}'s shared "
              "memory {} is gone and store.yaml named no new one within {} ms (read_timeout); "
              "open it again",
              name, m_dir.string(), *missing, info.segments[*missing],
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
