#include "ddstage/client.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/file_descriptor.hpp"
#include "ddstage/shard_layout.hpp"
#include "ddstage/shard_plan.hpp"
#include "ddstage/shm_segment.hpp"
#include "process.hpp"
#include "rank_lock.hpp"
#include "batch_timer.hpp"
#include "gpu/gpu_destination.hpp"
#include "read_batch.hpp"
#include "transport/copy_transport.hpp"
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_options.hpp"
#include "transport/fabric_transport.hpp"
#endif

namespace ddstage {
namespace detail {

/// One server rank as the readers of a dataset see it: read from its shared-memory segment
/// (mapped read-only) or over libfabric, where the layout computed from the index says where
/// each row lies in its registered region.
struct Peer {
  RankInfo info;
  ShardRange range;
  bool on_this_host = false;
  bool via_fabric = false;
  ShmSegment segment;                // mapped when read through shm, on this host, alive at open
  ShardView view;                    // valid when segment is mapped
  std::optional<ShardLayout> layout;  // when read over libfabric
  FileDescriptor process;            // pidfd of the rank's process (this host), when the kernel gives one

  bool mapped() const noexcept { return segment.bytes().data() != nullptr; }
};

/// What every Reader of a dataset shares: built by Client::open, read-only afterwards, so
/// readers on many threads use it without a lock.
struct OpenDataset {
  OpenDataset(std::string name_, std::filesystem::path store_, Index index_, ShardPlan plan_)
      : name(std::move(name_)),
        store(std::move(store_)),
        index(std::move(index_)),
        plan(std::move(plan_)) {}

  std::string name;
  std::filesystem::path store;  // the store directory, for error messages
  Index index;
  ShardPlan plan;
  std::vector<Peer> peers;  // by rank
  Settings settings;        // fabric.*, read_timeout: what each reader's transport is opened with
  std::vector<uint64_t> fabric_keys, fabric_bases;  // per rank, when the ranks serve over libfabric
  // Per rank, as store.yaml named them at open: a replace publishes new names.
  std::vector<std::string> segments;
};

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
    throw IndexError(fmt::format("the index {} changed after dataset '{}' was loaded into the store; "
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

/// Whether rank is read over libfabric under the `transport` setting: "fabric" reads every rank
/// that serves over it, "auto" those on other hosts, "shm" none.
bool reads_via_fabric(const RankInfo& rank, const StoreDataset& info, const std::string& transport,
                      bool on_this_host) {
  if (!DDSTAGE_HAVE_FABRIC || rank.fabric_address.empty() || info.fabric_keys.empty()) return false;
  return transport == "fabric" || (transport == "auto" && !on_this_host);
}

/// Maps rank r's segment when it is read through shm and alive. A dead rank stays unmapped, so
/// reads of its samples fail naming it while the other ranks' samples still read. nullopt when
/// the live rank's segment is gone or going: the dataset is being replaced (or unloaded).
std::optional<Peer> attach_peer(const RankInfo& rank, const StoreDataset& info, const Index& index,
                                ShardRange range, const std::string& here,
                                const std::string& transport) {
  const int r = rank.rank;
  Peer peer{.info = rank, .range = range, .on_this_host = rank.host == here};
  peer.via_fabric = reads_via_fabric(rank, info, transport, peer.on_this_host);
  if (peer.via_fabric) peer.layout.emplace(index, range);
  if (!peer.on_this_host || !process_alive(rank.pid)) return peer;
  // A pidfd polls readable once the process exits (zombie or reaped) and never follows a
  // reused pid: one poll() per batch checks every rank it touches. Without one (old kernel,
  // seccomp) reads fall back to process_alive.
  // (The raw syscall: Debian 12's <sys/pidfd.h> lacks C linkage for C++.)
  if (auto fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(rank.pid), 0u); fd >= 0) {
    peer.process = FileDescriptor(static_cast<int>(fd), "pidfd of rank " + std::to_string(r));
  }
  if (peer.via_fabric) return peer;
  auto segment = ShmSegment::try_open_read_only(info.segments[r]);
  if (!segment || segment->unlinked()) return std::nullopt;
  peer.segment = std::move(*segment);
  if (peer.segment.bytes().size() < info.region_bytes[r]) {
    throw IndexError(
        fmt::format("shared memory {} of dataset '{}' holds {} bytes; store.yaml says {}",
                    info.segments[r], info.name, peer.segment.bytes().size(), info.region_bytes[r]),
        {.rank = r});
  }
  peer.view = ShardView(peer.segment.bytes(), static_cast<uint32_t>(index.fields().size()), range);
  return peer;
}

/// Why the dataset this reader opened is no longer served as it was, from a fresh look at
/// store.yaml (only on a failure path: the store directory may sit on a slow shared file
/// system); empty when the store still lists the segments the reader mapped.
std::string why_withdrawn(const OpenDataset& data) {
  StoreDescriptor now;
  try {
    now = StoreDescriptor::read(data.store);
  } catch (const Error&) {
    return fmt::format("dataset '{}' is gone: the store at {} has stopped", data.name,
                       data.store.string());
  }
  for (const auto& d : now.datasets) {
    if (d.name != data.name) continue;
    if (d.segments == data.segments) return {};
    return fmt::format(
        "dataset '{}' was replaced in the store at {} (`ddstage load --replace`) after this "
        "reader opened it; reopen it",
        data.name, data.store.string());
  }
  return fmt::format("dataset '{}' was unloaded from the store at {}", data.name,
                     data.store.string());
}

/// A replace unlinks (or deregisters) each rank's old shard moments before rank 0 publishes the
/// new names: a reader that meets that gap waits this long at most for store.yaml to say so,
/// asking every withdrawn_poll (N readers on a parallel file system's metadata server).
constexpr auto withdrawn_wait = std::chrono::seconds(1);
constexpr auto withdrawn_poll = std::chrono::milliseconds(200);

/// Attaches every rank of the dataset to state; the rank whose segment is gone or going, if any.
std::optional<int> attach_peers(OpenDataset& state, const StoreDescriptor& store,
                                const StoreDataset& info, const std::string& transport) {
  if (transport == "fabric" && !DDSTAGE_HAVE_FABRIC) {
    throw UsageError("transport fabric: this ddstage was built without libfabric");
  }
  if (transport == "fabric" && info.fabric_keys.empty()) {
    throw UsageError(
        fmt::format("transport fabric: the store at {} does not serve over libfabric "
                    "(start it with `ddstage serve --transport fabric`)",
                    state.store.string()));
  }
  const std::string here = host_name();
  state.peers.reserve(store.ranks.size());
  for (const RankInfo& rank : store.ranks) {
    auto peer = attach_peer(rank, info, state.index, state.plan.range(rank.rank), here, transport);
    if (!peer) return rank.rank;
    state.peers.push_back(std::move(*peer));
  }
  return std::nullopt;
}

std::vector<std::span<const std::byte>> mapped_regions(const OpenDataset& dataset) {
  std::vector<std::span<const std::byte>> regions;
  regions.reserve(dataset.peers.size());
  for (const auto& peer : dataset.peers) regions.push_back(peer.segment.bytes());
  return regions;
}

}  // namespace
}  // namespace detail

// Readers hold the dataset through its base type: Dataset::State is private to Dataset.
struct Dataset::State : detail::OpenDataset {
  using OpenDataset::OpenDataset;
};

#if DDSTAGE_HAVE_FABRIC
namespace detail {
namespace {

/// A reader's fabric transport, when the dataset has ranks read over libfabric: its own
/// endpoint, aimed at those ranks' registered regions.
std::optional<FabricTransport> open_fabric(const OpenDataset& data) {
  std::vector<FabricRemote> remotes(data.peers.size());
  bool any = false;
  for (std::size_t r = 0; r < data.peers.size(); ++r) {
    const Peer& peer = data.peers[r];
    if (!peer.via_fabric) continue;
    remotes[r] = {{peer.info.fabric_provider, peer.info.fabric_address},
                  {data.fabric_keys[r], data.fabric_bases[r], peer.layout->total_bytes()},
                  peer.info.host};
    any = true;
  }
  if (!any) return std::nullopt;
  return std::optional<FabricTransport>(std::in_place, FabricOptions::from(data.settings), std::move(remotes));
}

}  // namespace
}  // namespace detail
#endif

/// A reader's own transports and scratch. The vectors are reused across batches, so a warm
/// reader allocates nothing per call.
struct Reader::State {
  explicit State(std::shared_ptr<const detail::OpenDataset> dataset)
      : data(std::move(dataset)),
        shm("shm", detail::mapped_regions(*data)),
#if DDSTAGE_HAVE_FABRIC
        fabric(detail::open_fabric(*data)),
#endif
        touched(data->peers.size()) {}

  /// Checks every id before anything is read and notes which ranks the batch touches.
  void collect_owners(std::span<const uint64_t> ids);
  /// Once per batch for the ranks it touches: reachable from here, and their processes still
  /// there (one poll() on their pidfds).
  void check_owners();
  /// One poll() on the watched pidfds: throw_gone for the first rank whose process has exited.
  void poll_processes();
  [[noreturn]] void throw_gone(int rank) const;
  /// Whether rank r's process is known to have exited (only ranks on this host are known).
  bool exited(int r) const;
  /// Rank r's segment was unlinked: says whether the dataset was replaced, unloaded or stopped.
  [[noreturn]] void throw_withdrawn(int rank);
  /// Remembers why the dataset is gone for good (every later batch says the same at once) and
  /// throws it.
  [[noreturn]] void throw_withdrawn(std::string why);
  /// Turns ids into reads at the caller's positions; a run of ids that are consecutive
  /// samples of one rank is one read (rows of a field lie back to back in a region).
  void plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest);
  /// Reads the batch into host memory: plans, copies and fetches, and verifies when asked.
  void transfer(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest, bool verify,
                detail::BatchTimer& timer);
  /// store.yaml's word on why the dataset is no longer served, asked every withdrawn_poll until
  /// `deadline` (at least once); throw_gone as soon as `rank`, if given, has exited. Empty when
  /// neither came.
  std::string wait_verdict(std::optional<int> rank, std::chrono::steady_clock::time_point deadline) const;
#if DDSTAGE_HAVE_FABRIC
  /// After a fabric read failed: throws why when the rank died or the dataset was withdrawn;
  /// returns when the error stands as it is. Waits only after what a replace can cause, and
  /// not past the batch's read_timeout.
  void explain(const detail::FabricError& error, std::chrono::steady_clock::time_point started);
#endif
  /// Empty when every rank of the batch is read from mapped memory; else why not.
  std::string why_not_direct() const;
  /// The reader's GPU destination, made on its first device batch.
  detail::GpuDestination& gpu();

  std::shared_ptr<const detail::OpenDataset> data;
  detail::CopyTransport shm;
#if DDSTAGE_HAVE_FABRIC
  std::optional<detail::FabricTransport> fabric;
#endif
  std::vector<detail::ReadOp> reads;         // through shm
  std::vector<detail::ReadOp> fabric_reads;  // over libfabric
  std::vector<uint8_t> touched;  // per rank; all zero between batches
  std::vector<int> owners;       // ranks the current batch touches
  std::vector<pollfd> watched;   // their pidfds
  std::vector<int> watched_ranks;
  std::optional<detail::GpuDestination> gpu_destination;
  std::vector<std::span<const std::byte>> regions;  // per rank: the mapped segment, for direct device copies
  std::string withdrawn;  // why the dataset was replaced or unloaded, once a batch found out
};

void Reader::State::collect_owners(std::span<const uint64_t> ids) {
  detail::check_ids(data->index, ids);
  owners.clear();
  // A batch's ids usually come in runs of one rank: look the owner up only when an id leaves
  // the current rank's range.
  ShardRange current;
  for (uint64_t id : ids) {
    if (id >= current.first && id < current.last) continue;
    const int r = data->plan.owner(id);
    current = data->peers[r].range;
    if (!touched[r]) {
      touched[r] = 1;
      owners.push_back(r);
    }
  }
  for (int r : owners) touched[r] = 0;
}

void Reader::State::check_owners() {
  if (!withdrawn.empty()) throw Error(ErrorKind::runtime, withdrawn);
  watched.clear();
  watched_ranks.clear();
  for (int r : owners) {
    const detail::Peer& peer = data->peers[r];
    if (!peer.on_this_host) {
      if (peer.via_fabric) continue;  // a remote rank that died shows as a read time-out
      throw UsageError(fmt::format("rank {} on {} is on another node and this client reads only shared "
                                   "memory: serve with --transport fabric (auto does on several hosts) "
                                   "and read with transport auto or fabric",
                                   r, peer.info.host),
                       {.rank = r});
    }
    // A shared mapping outlives its server, so only the process tells whether the store is
    // still whole.
    if ((!peer.via_fabric && !peer.mapped()) || (!peer.process && !detail::process_alive(peer.info.pid))) {
      throw_gone(r);
    }
    if (peer.process) {
      watched.push_back({.fd = peer.process.get(), .events = POLLIN, .revents = 0});
      watched_ranks.push_back(r);
    }
  }
  poll_processes();
  // After the processes: a stopping store's ranks unlink their segments before they exit. A
  // mapping outlives its name, so without this a reader would go on returning a replaced
  // dataset's old rows.
  for (int r : owners) {
    const detail::Peer& peer = data->peers[r];
    if (peer.mapped() && peer.segment.unlinked()) throw_withdrawn(r);
  }
}

void Reader::State::poll_processes() {
  if (watched.empty()) return;
  int ready = 0;
  do {
    ready = ::poll(watched.data(), watched.size(), 0);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) throw IoError("poll on the store's process handles", errno);
  for (std::size_t i = 0; ready > 0 && i < watched.size(); ++i) {
    if (watched[i].revents != 0) throw_gone(watched_ranks[i]);
  }
}

void Reader::State::throw_gone(int r) const {
  const RankInfo& info = data->peers[r].info;
  throw Error(ErrorKind::runtime,
              fmt::format("rank {} (pid {} on {}) is gone: its process has exited; restart the "
                          "store at {}",
                          r, info.pid, info.host, data->store.string()),
              {.rank = r});
}

std::string Reader::State::wait_verdict(std::optional<int> rank,
                                       std::chrono::steady_clock::time_point deadline) const {
  for (;;) {
    if (rank && exited(*rank)) throw_gone(*rank);
    if (auto why = detail::why_withdrawn(*data); !why.empty()) return why;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(detail::withdrawn_poll, deadline - now));
  }
}

bool Reader::State::exited(int r) const {
  const detail::Peer& peer = data->peers[r];
  if (!peer.process) return peer.on_this_host && !detail::process_alive(peer.info.pid);
  pollfd process{.fd = peer.process.get(), .events = POLLIN, .revents = 0};
  return ::poll(&process, 1, 0) > 0;
}

void Reader::State::throw_withdrawn(int r) {
  const auto wait = std::min<std::chrono::steady_clock::duration>(detail::withdrawn_wait,
                                                                 data->settings.get_duration("read_timeout"));
  auto why = wait_verdict(std::nullopt, std::chrono::steady_clock::now() + wait);
  if (why.empty()) {
    why = fmt::format(
        "dataset '{}' is no longer served: rank {}'s shared memory {} was removed (is the store "
        "at {} stopping?)",
        data->name, r, data->peers[r].segment.name(), data->store.string());
  }
  throw_withdrawn(std::move(why));
}

void Reader::State::throw_withdrawn(std::string why) {
  withdrawn = std::move(why);
  throw Error(ErrorKind::runtime, withdrawn);
}

void Reader::State::plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest) {
  reads.clear();
  fabric_reads.clear();
  const FieldInfo& info = data->index.fields()[field];
  const detail::Peer* peer = nullptr;
  int rank = -1;
  for (uint64_t id : ids) {
    if (!peer || id < peer->range.first || id >= peer->range.last) {
      rank = data->plan.owner(id);
      peer = &data->peers[rank];
    }
    if (peer->via_fabric) {
      const uint64_t bytes = info.variable ? data->index.entry(id, field).length : info.row_bytes;
      if (bytes == 0) continue;
      detail::append_read(fabric_reads, {peer->layout->row_offset(id, field), bytes, dest, rank});
      dest += bytes;
      continue;
    }
    const auto row = peer->view.row(id, field);
    const auto region = peer->segment.bytes();
    const auto offset = static_cast<uint64_t>(row.data() - region.data());
    // The offsets tables live in the server's memory: never copy from outside the mapping, nor
    // more than the index's row, which is what dest was sized by.
    if (row.size() > region.size() || offset > region.size() - row.size()) {
      throw IndexError(
          "the shard region of rank " + std::to_string(rank) + " is damaged: a row lies outside it",
          {.sample = id, .field = data->index.fields()[field].name, .rank = rank});
    }
    if (const uint64_t want = data->index.entry(id, field).length; row.size() != want) {
      throw IndexError(fmt::format("the shard region of rank {} holds a {}-byte row where the index has {} "
                                   "bytes; reload the dataset",
                                   rank, row.size(), want),
                       {.sample = id, .field = data->index.fields()[field].name, .rank = rank});
    }
    if (row.empty()) continue;
    detail::append_read(reads, {offset, row.size(), dest, rank});
    dest += row.size();
  }
}

Reader::Reader(std::unique_ptr<State> state) : m(std::move(state)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

uint64_t Reader::batch_bytes(const std::string& field, std::span<const uint64_t> ids) const {
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  detail::check_ids(index, ids);
  return detail::bytes_of(index, f, ids);
}

void Reader::row_sizes(const std::string& field, std::span<const uint64_t> ids,
                       std::span<uint64_t> sizes) const {
  detail::row_sizes_of(m->data->index, field, ids, sizes);
}

void Reader::State::transfer(uint32_t f, std::span<const uint64_t> ids, std::span<std::byte> dest,
                             bool verify, detail::BatchTimer& timer) {
  const auto started = std::chrono::steady_clock::now();
  plan_reads(f, ids, dest.data());
  timer.mark(ProfileStage::other);
  try {
#if DDSTAGE_HAVE_FABRIC
    // Remote reads first: shm copies run while they are in flight.
    if (!fabric_reads.empty()) {
      timer.path("fabric");
      fabric->post(fabric_reads);
      timer.mark(ProfileStage::post);
    }
#endif
    if (!reads.empty()) timer.path("shm");
    shm.post(reads);
    shm.wait();
    timer.mark(ProfileStage::copy);
#if DDSTAGE_HAVE_FABRIC
    if (!fabric_reads.empty()) {
      fabric->wait();
      timer.mark(ProfileStage::completion_wait);
    }
#endif
  }
#if DDSTAGE_HAVE_FABRIC
  catch (const detail::FabricError& e) {
    explain(e, started);
    throw;
  }
#endif
  catch (const Error&) {
    // A time-out has waited read_timeout already: store.yaml as it is now.
    if (!fabric_reads.empty()) {
      if (auto why = detail::why_withdrawn(*data); !why.empty()) throw_withdrawn(std::move(why));
    }
    throw;
  }
  if (verify) {
    detail::verify_rows(data->index, data->plan, f, ids, dest.data());
    timer.mark(ProfileStage::other);  // not the GPU copy that may follow
  }
}

#if DDSTAGE_HAVE_FABRIC
void Reader::State::explain(const detail::FabricError& error, std::chrono::steady_clock::time_point started) {
  // A replace deregisters the old regions: libfabric reports a refused key or a broken
  // connection, which a rank that died gives too; store.yaml or the rank's process (on this
  // host) tells which, once rank 0 has published it or the process is reaped.
  auto deadline = std::chrono::steady_clock::now();
  if (error.may_be_withdrawn()) {
    deadline = std::min(deadline + detail::withdrawn_wait, started + data->settings.get_duration("read_timeout"));
  }
  if (auto why = wait_verdict(error.context().rank, deadline); !why.empty()) throw_withdrawn(std::move(why));
}
#endif

std::string Reader::State::why_not_direct() const {
  for (int r : owners) {
    const detail::Peer& peer = data->peers[r];
    if (peer.via_fabric) {
      return fmt::format("rank {} on {} is read over libfabric ({}), and ddstage does not yet register "
                         "device memory with FI_HMEM",
                         r, peer.info.host, peer.info.fabric_provider);
    }
  }
  return {};
}

detail::GpuDestination& Reader::State::gpu() {
  if (!gpu_destination) {
    gpu_destination.emplace(data->settings.get_string("gpu.path"));
    regions = detail::mapped_regions(*data);
  }
  return *gpu_destination;
}

void Reader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                       std::span<std::byte> dest, bool verify) {
  detail::BatchTimer timer;
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  m->collect_owners(ids);
  if (const uint64_t need = detail::bytes_of(index, f, ids); dest.size() != need) {
    throw UsageError(
        fmt::format("destination holds {} bytes; the batch needs {}", dest.size(), need));
  }
  m->check_owners();
  m->transfer(f, ids, dest, verify, timer);
  timer.finish(ids.size(), dest.size());
}

void Reader::get_batch(const std::string& field, std::span<const uint64_t> ids, const DeviceBuffer& dest,
                       bool verify) {
  detail::BatchTimer timer;
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  m->collect_owners(ids);
  detail::GpuDestination& gpu = m->gpu();
  gpu.begin(dest, detail::bytes_of(index, f, ids));
  m->check_owners();
  if (gpu.choose(m->why_not_direct()) == GpuPath::staged) {
    timer.path("gpu staged");
    bool replaced = false;
    const auto host = gpu.bounce(dest.bytes, &replaced);
#if DDSTAGE_HAVE_FABRIC
    if (replaced && m->fabric) m->fabric->forget_destinations();
#endif
    m->transfer(f, ids, host, verify, timer);
    gpu.finish_staged(dest);
  } else {
    timer.path("gpu direct");
    m->plan_reads(f, ids, static_cast<std::byte*>(dest.ptr));
    timer.mark(ProfileStage::other);
    gpu.copy_direct(m->reads, m->regions, dest);
    if (verify) detail::verify_rows(index, m->data->plan, f, ids, gpu.copy_back(dest).data());
  }
  timer.finish(ids.size(), dest.bytes);
}

Dataset::Dataset(std::shared_ptr<State> state) : m(std::move(state)) {}
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
  return Reader(std::make_unique<Reader::State>(m));
}

Client::Client(const std::filesystem::path& dir, Settings settings)
    : m_dir(dir), m_descriptor(StoreDescriptor::read(dir)), m_settings(std::move(settings)) {
  profile::configure(m_settings.get_string("profile"));
  // read() guarantees at least one rank. Without a fabric or control round trip only a
  // rank 0 on this host can be checked; a remote one is trusted until a read needs it.
  // The rank lock proves it; a pid alone could have been reused.
  const RankInfo& root = m_descriptor.ranks.front();
  const bool gone = m_descriptor.id.empty() ? !detail::process_alive(root.pid)
                                            : detail::rank_presence(m_descriptor.id, 0) != detail::RankPresence::live;
  if (root.host == detail::host_name() && gone) {
    throw UsageError(
        fmt::format("the store at {} is not running (rank 0, pid {} on {}, is gone); `ddstage stop --store {}` "
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
    auto state = std::make_shared<Dataset::State>(name, m_dir, std::move(index), std::move(plan));
    state->settings = m_settings;
    state->fabric_keys = info.fabric_keys;
    state->fabric_bases = info.fabric_bases;
    state->segments = info.segments;
    const auto missing =
        detail::attach_peers(*state, store, info, m_settings.get_string("transport"));
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
