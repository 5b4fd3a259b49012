#include "ddstage/store.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/shard_layout.hpp"
#include "ddstage/shard_loader.hpp"
#include "ddstage/shard_plan.hpp"
#include "mpi/mpi_comm.hpp"
#include "mpi/mpi_window.hpp"
#include "process.hpp"
#include "batch_timer.hpp"
#include "gpu/gpu_destination.hpp"
#include "read_batch.hpp"
#include "transport/mpi_all_to_all.hpp"
#include "transport/copy_transport.hpp"
#include "transport/mpi_rma_transport.hpp"
#include "ddstage/config.hpp"
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_server.hpp"
#include "transport/fabric_transport.hpp"
#endif

namespace ddstage {
namespace detail {

/// One loaded dataset. Every rank computes every rank's layout from the index, so a reader
/// finds any remote row by arithmetic, with no metadata round trip.
struct EmbeddedDataset {
  EmbeddedDataset(std::string name_, Index index_, int ranks)
      : name(std::move(name_)), index(std::move(index_)), plan(ShardPlan::balance(index, ranks)) {
    layouts.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) layouts.emplace_back(index, plan.range(r));
  }

  std::string name;
  Index index;
  ShardPlan plan;
  std::vector<ShardLayout> layouts;      // by rank
  // This rank's shard: for transport mpi in a window with every rank's, for fabric in plain
  // memory registered with libfabric alone; region is it, in whichever holds it.
  MpiWindow window;
  std::unique_ptr<std::byte[]> memory;
  std::span<std::byte> region;
  std::vector<const std::byte*> direct;  // by rank: the region when this process maps it, or null
#if DDSTAGE_HAVE_FABRIC
  std::optional<FabricRegistration> registration;  // after memory: deregistered before it is freed
  std::vector<FabricRemote> remotes;               // by rank, for ranks read over libfabric
#endif
};

namespace {

/// A failure as one line for the other ranks: kind letter, then the message with its context.
std::string describe(const std::exception_ptr& failure) {
  if (!failure) return {};
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return (e.kind() == ErrorKind::usage ? "U" : "R") + std::string(e.what());
  } catch (const std::exception& e) {
    return "R" + std::string(e.what());
  } catch (...) {
    return "Ran unknown exception";
  }
}

/// Collective. Returns when no rank failed; otherwise throws on every rank: the first failing
/// rank its own exception, the others an error of the same kind naming that rank.
void agree(const std::exception_ptr& failure, MPI_Comm comm, int self) {
  const auto first = first_failure(describe(failure), comm);
  if (!first) return;
  if (first->rank == self) std::rethrow_exception(failure);
  const std::string message = fmt::format("rank {} failed: {}", first->rank, first->text.substr(1));
  if (first->text[0] == 'U') throw UsageError(message, {.rank = first->rank});
  throw Error(ErrorKind::runtime, message, {.rank = first->rank});
}

}  // namespace
}  // namespace detail

struct Store::State {
  State(int fortran_comm, StoreOptions options_)
      : comm(MPI_Comm_f2c(fortran_comm)), options(options_) {
    MPI_Comm_rank(comm.get(), &rank);
    MPI_Comm_size(comm.get(), &size);
    MPI_Query_thread(&thread_level);
    const int on_node = ranks_on_node();
    // A fabric Store makes no MPI window at all: across nodes whose MPI has no one-sided
    // support (OpenMPI over the tcp BTL alone) creating one fails, whatever reads it would serve.
    shared = options.direct_on_node && on_node == size && options.transport == "mpi";
    if (options.mem_limit) {
      mem_limit = options.mem_limit;
    } else {
      auto limit = detail::default_memory_limit(on_node);
      mem_limit = limit.bytes;
      mem_limit_source = "default: " + limit.source;
    }
    if (options.transport == "fabric") open_fabric();
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// Collective, as freeing a window is: a fabric shard is plain memory its own rank frees
  /// alone, so every rank first waits until no rank reads any more.
  ~State() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (options.transport != "fabric" || datasets.empty() || finalized) return;
    if (MPI_Barrier(comm.get()) != MPI_SUCCESS)
      spdlog::warn("Store: MPI_Barrier before freeing the shards failed");
  }

  /// Collective: every rank's libfabric endpoint, agreed on, and every rank's address.
  void open_fabric();
  /// Collective, after the shard is filled: registers this rank's region and learns every
  /// rank's key and base.
  void register_fabric(detail::EmbeddedDataset& ds);

  /// How many ranks of comm share this node's memory (this one included).
  int ranks_on_node() const;
  /// UsageError unless this rank can hold `need` more bytes within mem_limit.
  void check_fits(const std::string& name, uint64_t need) const;
  /// This rank's part of a load, collective for transport mpi: ds's window (shared on one
  /// node), or plain memory for transport fabric.
  void allocate(detail::EmbeddedDataset& ds, uint64_t bytes) const;

  const detail::EmbeddedDataset& find(const std::string& name) const;
  std::unique_ptr<detail::EmbeddedDataset> prepare(const std::filesystem::path& path,
                                                   std::string name) const;
  /// Collective: UsageError on every rank unless all ranks opened the same index.
  void check_same_index(const Index& index, const std::filesystem::path& path) const;
  void fill(detail::EmbeddedDataset& ds, bool verify) const;

  detail::MpiCommDup comm;  // declared first: freed after every window on it
  StoreOptions options;
  int rank = 0;
  int size = 1;
  int thread_level = 0;
  bool shared = false;  // shards in shared windows, read by memcpy from any rank
  uint64_t mem_limit = 0;
  std::string mem_limit_source = "StoreOptions::mem_limit";  // for the error that cites it
#if DDSTAGE_HAVE_FABRIC
  std::optional<detail::FabricServer> fabric;  // before datasets: outlives their registrations
  std::vector<detail::FabricPeer> fabric_peers;  // by rank
  std::vector<std::string> hosts;              // by rank, for error messages
#endif
  // In load order, which is the same on every rank, so destruction frees the windows (a
  // collective) in the same order everywhere.
  std::vector<std::unique_ptr<detail::EmbeddedDataset>> datasets;
};

void Store::State::open_fabric() {
#if DDSTAGE_HAVE_FABRIC
  std::exception_ptr failure;
  try {
    fabric.emplace(detail::FabricOptions::from(options.settings));
  } catch (...) {
    failure = std::current_exception();
  }
  detail::agree(failure, comm.get(), rank);
  const auto peer = fabric->peer();
  const auto all = detail::allgather_strings(peer.provider + " " + peer.address_hex + " " + detail::host_name(),
                                             comm.get());
  for (const auto& line : all) {
    std::istringstream in(line);
    detail::FabricPeer p;
    std::string host;
    in >> p.provider >> p.address_hex >> host;
    fabric_peers.push_back(p);
    hosts.push_back(host);
  }
#else
  throw UsageError("StoreOptions::transport fabric: this ddstage was built without libfabric");
#endif
}

void Store::State::register_fabric([[maybe_unused]] detail::EmbeddedDataset& ds) {
#if DDSTAGE_HAVE_FABRIC
  if (!fabric) return;
  std::exception_ptr failure;
  std::string mine;
  try {
    ds.registration.emplace(*fabric, ds.region);
    mine = fmt::format("{} {}", ds.registration->info().key, ds.registration->info().base);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::agree(failure, comm.get(), rank);
  const auto all = detail::allgather_strings(mine, comm.get());
  ds.remotes.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (ds.direct[i]) continue;  // copied, not read over the network
    std::istringstream in(all[i]);
    detail::FabricRegionInfo region{.bytes = ds.layouts[i].total_bytes()};
    in >> region.key >> region.base;
    ds.remotes[i] = {fabric_peers[i], region, hosts[i]};
  }
#endif
}

int Store::State::ranks_on_node() const {
  MPI_Comm node = MPI_COMM_NULL;
  detail::mpi_check(
      MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type");
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  return node_size;
}

void Store::State::check_fits(const std::string& name, uint64_t need) const {
  uint64_t used = 0;
  for (const auto& ds : datasets) used += ds->region.size();
  if (used + need > mem_limit) {
    throw UsageError(fmt::format(
        "dataset '{}' does not fit: rank {} on {} needs {} bytes, has {} of {} free ({}; set "
        "StoreOptions::mem_limit)",
        name, rank, detail::host_name(), need, mem_limit - std::min(mem_limit, used), mem_limit,
        mem_limit_source));
  }
}

const detail::EmbeddedDataset& Store::State::find(const std::string& name) const {
  std::string loaded;
  for (const auto& ds : datasets) {
    if (ds->name == name) return *ds;
    loaded += (loaded.empty() ? "" : ", ") + ds->name;
  }
  throw UsageError(fmt::format("no dataset '{}' is loaded in this store (loaded: {})", name,
                               loaded.empty() ? "none" : loaded));
}

std::unique_ptr<detail::EmbeddedDataset> Store::State::prepare(const std::filesystem::path& path,
                                                               std::string name) const {
  auto index = Index::open(path);
  if (name.empty()) name = index.manifest().name;
  for (const auto& ds : datasets) {
    if (ds->name == name)
      throw UsageError("dataset '" + name + "' is already loaded in this store");
  }
  return std::make_unique<detail::EmbeddedDataset>(std::move(name), std::move(index), size);
}

void Store::State::check_same_index(const Index& index, const std::filesystem::path& path) const {
  // Every rank computes every rank's layout from its own copy of the index instead of asking:
  // that only works if all copies are the same. Equal minima of v and ~v mean equal values.
  const uint64_t mine[2] = {index.fingerprint(), ~index.fingerprint()};
  uint64_t lowest[2] = {};
  detail::mpi_check(MPI_Allreduce(mine, lowest, 2, MPI_UINT64_T, MPI_MIN, comm.get()),
                    "MPI_Allreduce");
  if (lowest[0] != mine[0] || lowest[1] != mine[1]) {
    throw UsageError("the ranks opened different indexes at " + path.string() +
                     " (one path, different contents): give every rank the same index");
  }
}

void Store::State::allocate(detail::EmbeddedDataset& ds, uint64_t bytes) const {
  if (options.transport == "fabric") {
    try {
      ds.memory = std::make_unique_for_overwrite<std::byte[]>(bytes);
    } catch (const std::bad_alloc&) {
      throw Error(ErrorKind::runtime,
                  fmt::format("cannot allocate {} bytes for rank {}'s shard of '{}' on {}", bytes,
                              rank, ds.name, detail::host_name()),
                  {.rank = rank});
    }
    ds.region = {ds.memory.get(), bytes};
    return;
  }
  ds.window = shared ? detail::MpiWindow::allocate_shared(bytes, comm.get())
                     : detail::MpiWindow::allocate(bytes, comm.get());
  ds.region = ds.window.region();
}

void Store::State::fill(detail::EmbeddedDataset& ds, bool verify) const {
  fill_shard(ds.index, ds.layouts[static_cast<std::size_t>(rank)], ds.region,
             {.verify = verify, .allow_stale = options.allow_stale});
}

Store::Store(int fortran_comm, StoreOptions options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) throw UsageError("a Store needs MPI: call MPI_Init (or MPI_Init_thread) first");
  if (options.transport != "mpi" && options.transport != "fabric") {
    throw UsageError("StoreOptions::transport must be mpi or fabric, not '" + options.transport + "'");
  }
  if (options.max_round_bytes == 0 || options.max_round_bytes > static_cast<uint64_t>(INT_MAX)) {
    throw UsageError(fmt::format("max_round_bytes must be 1 to {} bytes, not {}", INT_MAX,
                                 options.max_round_bytes));
  }
  profile::configure(options.settings.get_string("profile"));
  m = std::make_unique<State>(fortran_comm, options);
}

Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

int Store::rank() const noexcept {
  return m->rank;
}
int Store::size() const noexcept {
  return m->size;
}
int Store::thread_level() const noexcept {
  return m->thread_level;
}

void Store::load(const std::filesystem::path& index, const std::string& name, bool verify) {
  const MPI_Comm comm = m->comm.get();
  // Phase 1, nothing allocated: can every rank open the index and hold its shard?
  std::unique_ptr<detail::EmbeddedDataset> ds;
  std::exception_ptr failure;
  uint64_t bytes = 0;
  try {
    ds = m->prepare(index, name);
    bytes = ds->layouts[static_cast<std::size_t>(m->rank)].total_bytes();
    m->check_fits(ds->name, bytes);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::agree(failure, comm, m->rank);
  m->check_same_index(ds->index, index);
  // Phase 2: allocate and fill; on any failure every rank drops its window (a collective).
  // An allocation that fails on every rank alike (what MPI libraries do: the window is one
  // collective object) is agreed on like any other failure; the mem_limit check above is what
  // keeps a rank from failing alone.
  try {
    m->allocate(*ds, bytes);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::agree(failure, comm, m->rank);
  const bool windowed = ds->window.get() != MPI_WIN_NULL;
  if (windowed) ds->window.lock_all();
  try {
    m->fill(*ds, verify);
  } catch (...) {
    failure = std::current_exception();
  }
  // Syncs around the agreeing collective order every rank's fill before any direct read.
  if (windowed) ds->window.sync();
  detail::agree(failure, comm, m->rank);
  if (windowed) ds->window.sync();
  if (m->shared) {
    ds->direct = ds->window.shared_bases(m->size);
  } else {
    // Others' rows by MPI_Get or libfabric.
    ds->direct.assign(static_cast<std::size_t>(m->size), nullptr);
    ds->direct[static_cast<std::size_t>(m->rank)] = ds->region.data();
  }
  m->register_fabric(*ds);
  m->datasets.push_back(std::move(ds));
}

const Index& Store::index(const std::string& name) const {
  return m->find(name).index;
}

struct Store::Reader::State {
  State(const detail::EmbeddedDataset& data_, const Store::State& store)
      : data(&data_),
        comm(store.comm.get()),
        self(store.rank),
        map{&data->index, &data->plan, &data->layouts[static_cast<std::size_t>(self)],
            data->region},
        // No window (fabric): transfer() gives it only this rank's rows, copied.
        rma(data->window.get(), data->direct),
        all_to_all(comm, store.options.max_round_bytes),
        gpu(store.options.settings.get_string("gpu.path")) {
    for (std::size_t r = 0; r < data->direct.size(); ++r) {
      direct_regions.emplace_back(data->direct[r], data->direct[r] ? data->layouts[r].total_bytes() : 0);
    }
#if DDSTAGE_HAVE_FABRIC
    const auto remote = [](const detail::FabricRemote& r) { return !r.peer.address_hex.empty(); };
    // With every rank addressed directly (one rank, or a shared window) there is nothing to
    // read over the network: the RMA path's memcpy serves.
    if (store.fabric && std::any_of(data->remotes.begin(), data->remotes.end(), remote)) {
      local.emplace("local", direct_regions);
      fabric.emplace(detail::FabricOptions::from(store.options.settings), data->remotes);
    }
#endif
  }

  /// Reads the planned batch: over libfabric (and memcpy for directly addressed ranks) when
  /// the Store was made with it, else MPI RMA.
  void transfer(detail::BatchTimer& timer);
  /// Empty when every rank's region is addressed directly; else why rows cannot go straight
  /// to device memory.
  std::string why_not_direct() const;

  /// Turns ids into reads at the caller's positions; a run of consecutive samples of one rank
  /// is one read.
  void plan_reads(uint32_t field, std::span<const uint64_t> ids, std::byte* dest);
  /// The checks get_batch_collective agrees on before any row moves; the field's id.
  uint32_t check_collective(const std::string& field, std::span<const uint64_t> ids,
                            std::size_t dest_bytes) const;

  const detail::EmbeddedDataset* data;
  MPI_Comm comm;
  int self;
  detail::ShardMap map;
  detail::MpiRmaTransport rma;
  detail::MpiAllToAll all_to_all;
  std::vector<detail::ReadOp> reads;  // reused across batches
  detail::GpuDestination gpu;
  std::vector<std::span<const std::byte>> direct_regions;  // by rank, for direct device copies
#if DDSTAGE_HAVE_FABRIC
  std::optional<detail::CopyTransport> local;
  std::optional<detail::FabricTransport> fabric;
  std::vector<detail::ReadOp> local_reads, fabric_reads;
#endif
};

void Store::Reader::State::transfer(detail::BatchTimer& timer) {
#if DDSTAGE_HAVE_FABRIC
  if (fabric) {
    local_reads.clear();
    fabric_reads.clear();
    for (const auto& op : reads) (data->direct[static_cast<std::size_t>(op.rank)] ? local_reads : fabric_reads).push_back(op);
    if (!fabric_reads.empty()) {
      timer.path("fabric");
      fabric->post(fabric_reads);
      timer.mark(ProfileStage::post);
    }
    if (!local_reads.empty()) timer.path("local");
    local->post(local_reads);
    timer.mark(ProfileStage::copy);
    if (!fabric_reads.empty()) {
      fabric->wait();
      timer.mark(ProfileStage::completion_wait);
    }
    return;
  }
#endif
  // MPI_Get and the shared window's memcpy interleave in one pass: a shared window (every
  // rank direct) is all copy, anything else counts as posting.
  const bool all_direct = std::all_of(reads.begin(), reads.end(), [this](const detail::ReadOp& op) {
    return data->direct[static_cast<std::size_t>(op.rank)] != nullptr;
  });
  timer.path(all_direct ? "local" : "mpi-rma");
  rma.post(reads);
  timer.mark(all_direct ? ProfileStage::copy : ProfileStage::post);
  rma.wait();
  timer.mark(ProfileStage::completion_wait);
}

std::string Store::Reader::State::why_not_direct() const {
  for (std::size_t r = 0; r < data->direct.size(); ++r) {
    if (!data->direct[r]) {
      return fmt::format("rank {}'s rows come with MPI_Get or libfabric into host memory (direct needs "
                         "every rank on one node with direct_on_node)",
                         r);
    }
  }
  return {};
}

void Store::Reader::State::plan_reads(uint32_t field, std::span<const uint64_t> ids,
                                      std::byte* dest) {
  reads.clear();
  const FieldInfo& info = data->index.fields()[field];
  int rank = 0;
  ShardRange range;
  for (uint64_t id : ids) {
    // Ids usually come in runs of one rank: look the owner up only when one leaves its range.
    if (id < range.first || id >= range.last) {
      rank = data->plan.owner(id);
      range = data->plan.range(rank);
    }
    const uint64_t bytes = info.variable ? data->index.entry(id, field).length : info.row_bytes;
    if (bytes == 0) continue;
    detail::append_read(reads, {data->layouts[static_cast<std::size_t>(rank)].row_offset(id, field),
                                bytes, dest, rank});
    dest += bytes;
  }
}

uint32_t Store::Reader::State::check_collective(const std::string& field,
                                                std::span<const uint64_t> ids,
                                                std::size_t dest_bytes) const {
  const uint32_t f = detail::field_of(data->index, field);
  detail::check_ids(data->index, ids);
  const uint64_t need = detail::bytes_of(data->index, f, ids);
  if (dest_bytes != need) {
    throw UsageError(
        fmt::format("destination holds {} bytes; the batch needs {}", dest_bytes, need));
  }
  // MPI counts and displacements are int: a rank's whole batch must fit one.
  if (need > static_cast<uint64_t>(INT_MAX) || ids.size() > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError(
        fmt::format("a collective batch of {} ids, {} bytes is too large (under 2 GiB per rank "
                    "per call): split it",
                    ids.size(), need));
  }
  return f;
}

Store::Reader Store::reader(const std::string& name) const {
  return Reader(std::make_unique<Reader::State>(m->find(name), *m));
}

Store::Reader::Reader(std::unique_ptr<State> state) : m(std::move(state)) {}
Store::Reader::Reader(Reader&&) noexcept = default;
Store::Reader& Store::Reader::operator=(Reader&&) noexcept = default;
Store::Reader::~Reader() = default;

uint64_t Store::Reader::batch_bytes(const std::string& field, std::span<const uint64_t> ids) const {
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  detail::check_ids(index, ids);
  return detail::bytes_of(index, f, ids);
}

void Store::Reader::row_sizes(const std::string& field, std::span<const uint64_t> ids,
                              std::span<uint64_t> sizes) const {
  detail::row_sizes_of(m->data->index, field, ids, sizes);
}

void Store::Reader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                              std::span<std::byte> dest, bool verify) {
  detail::BatchTimer timer;
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  detail::check_ids(index, ids);
  if (const uint64_t need = detail::bytes_of(index, f, ids); dest.size() != need) {
    throw UsageError(
        fmt::format("destination holds {} bytes; the batch needs {}", dest.size(), need));
  }
  m->plan_reads(f, ids, dest.data());
  timer.mark(ProfileStage::other);
  m->transfer(timer);
  if (verify) detail::verify_rows(index, m->data->plan, f, ids, dest.data());
  timer.finish(ids.size(), dest.size());
}

void Store::Reader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                              const DeviceBuffer& dest, bool verify) {
  detail::BatchTimer timer;
  const Index& index = m->data->index;
  const uint32_t f = detail::field_of(index, field);
  detail::check_ids(index, ids);
  m->gpu.begin(dest, detail::bytes_of(index, f, ids));
  if (m->gpu.choose(m->why_not_direct()) == GpuPath::staged) {
    timer.path("gpu staged");
    bool replaced = false;
    const auto host = m->gpu.bounce(dest.bytes, &replaced);
#if DDSTAGE_HAVE_FABRIC
    if (replaced && m->fabric) m->fabric->forget_destinations();
#endif
    m->plan_reads(f, ids, host.data());
    timer.mark(ProfileStage::other);
    m->transfer(timer);
    if (verify) {
      detail::verify_rows(index, m->data->plan, f, ids, host.data());
      timer.mark(ProfileStage::other);  // not the GPU copy that follows
    }
    m->gpu.finish_staged(dest);
  } else {
    timer.path("gpu direct");
    m->plan_reads(f, ids, static_cast<std::byte*>(dest.ptr));
    timer.mark(ProfileStage::other);
    m->gpu.copy_direct(m->reads, m->direct_regions, dest);
    if (verify) detail::verify_rows(index, m->data->plan, f, ids, m->gpu.copy_back(dest).data());
  }
  timer.finish(ids.size(), dest.bytes);
}

void Store::Reader::get_batch_collective(const std::string& field, std::span<const uint64_t> ids,
                                         std::span<std::byte> dest) {
  // Every rank must take part in every exchange, so bad input anywhere stops all ranks here,
  // before the first all-to-all.
  uint32_t f = 0;
  std::exception_ptr failure;
  try {
    f = m->check_collective(field, ids, dest.size());
  } catch (...) {
    failure = std::current_exception();
  }
  detail::BatchTimer timer;
  detail::agree(failure, m->comm, m->self);
  timer.mark(ProfileStage::other);
  timer.path("mpi-alltoall");
  m->all_to_all.exchange(m->map, f, ids, dest.data());
  timer.mark(ProfileStage::completion_wait);
  timer.finish(ids.size(), dest.size());
}

}  // namespace ddstage
