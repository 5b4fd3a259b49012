#include "ddstage/store.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <exception>
#include <memory>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "batch_timer.hpp"
#include "ddstage/client.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"
#include "mpi/mpi_window.hpp"
#include "process.hpp"
#include "read/batch_reader.hpp"
#include "read/collective_exchange.hpp"
#include "read/embedded_fabric.hpp"
#include "read/read_batch.hpp"
#include "read/route_table.hpp"

namespace ddstage {
namespace detail {

/// One loaded dataset. Every rank computes every rank's layout from the index, so a reader
/// finds any remote row by arithmetic, with no metadata round trip.
struct EmbeddedDataset final : RouteSource {
  EmbeddedDataset(std::string name_, Index index_, int ranks)
      : name(std::move(name_)),
        index(std::move(index_)),
        plan(ShardPlan::balance(index, ranks)),
        placement(ranges_of(plan), index.samples()) {
    layouts.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) layouts.emplace_back(index, plan.range(r));
    table.index = &index;
    table.placement = &placement;
    table.ranks = ranks;
  }
  EmbeddedDataset(const EmbeddedDataset&) = delete;  // the table points into it
  EmbeddedDataset& operator=(const EmbeddedDataset&) = delete;

  const RouteTable& routes() const noexcept override { return table; }
  /// After the shard is filled (and, for fabric, registered): how this rank reads every rank.
  void build_routes(const Settings& settings);

  std::string name;
  Index index;
  ShardPlan plan;
  Placement placement;               // region r: rank r's shard
  std::vector<ShardLayout> layouts;  // by rank
  // This rank's shard: for transport mpi in a window with every rank's, for fabric in plain
  // memory registered with libfabric alone; region is it, in whichever holds it.
  MpiWindow window;
  std::unique_ptr<std::byte[]> memory;
  std::span<std::byte> region;
  std::vector<const std::byte*> direct;  // by rank: the region when this process maps it, or null
  std::unique_ptr<ShardRegistration> registration;  // after memory: deregistered before it is freed
  RouteTable table;
  std::optional<CollectiveExchange> exchange;  // get_batch_collective's, made on first use
};

void EmbeddedDataset::build_routes(const Settings& settings) {
  const std::size_t n = layouts.size();
  table.settings = settings;
  table.routes.resize(n);
  table.targets.mapped.resize(n);
  table.targets.direct.assign(n, nullptr);  // directly addressed ranks are copied through shm
  // Filled by EmbeddedFabric::expose for ranks read over libfabric.
  table.targets.remotes.resize(n);
  if (window.get() != MPI_WIN_NULL) table.targets.window = &window;
  for (std::size_t r = 0; r < n; ++r) {
    Route& route = table.routes[r];
    route.range = plan.range(static_cast<int>(r));
    route.rank = static_cast<int>(r);
    route.layout = &layouts[r];
    if (direct[r]) {
      route.via = TransportId::shm;
      route.mapped = {direct[r], layouts[r].total_bytes()};
      table.targets.mapped[r] = route.mapped;
      continue;
    }
    route.distance = 1;
    route.via =
        table.targets.remotes[r].peer.address_hex.empty() ? TransportId::mpi : TransportId::fabric;
    route.why_not_direct = fmt::format(
        "rank {}'s rows come with MPI_Get or libfabric into host memory (direct needs every rank "
        "on one node with direct_on_node)",
        r);
  }
}

}  // namespace detail

struct Store::State {
  State(int fortran_comm, StoreOptions options_, detail::TransportId transport_)
      : comm(MPI_Comm_f2c(fortran_comm)), options(options_), transport(transport_) {
    MPI_Comm_rank(comm.get(), &rank);
    MPI_Comm_size(comm.get(), &size);
    MPI_Query_thread(&thread_level);
    const int on_node = ranks_on_node();
    // A fabric Store makes no MPI window at all: across nodes whose MPI has no one-sided
    // support (OpenMPI over the tcp BTL alone) creating one fails, whatever reads it would serve.
    shared = options.direct_on_node && on_node == size && transport == detail::TransportId::mpi;
    if (options.mem_limit) {
      mem_limit = options.mem_limit;
    } else {
      auto limit = detail::default_memory_limit(on_node);
      mem_limit = limit.bytes;
      mem_limit_source = "default: " + limit.source;
    }
    if (transport == detail::TransportId::fabric)
      fabric = std::make_unique<detail::EmbeddedFabric>(options.settings, comm.get());
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// Collective, as freeing a window is: a fabric shard is plain memory its own rank frees
  /// alone, so every rank first waits until no rank reads any more.
  ~State() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (transport != detail::TransportId::fabric || datasets.empty() || finalized) return;
    if (MPI_Barrier(comm.get()) != MPI_SUCCESS)
      spdlog::warn("Store: MPI_Barrier before freeing the shards failed");
  }

  /// How many ranks of comm share this node's memory (this one included).
  int ranks_on_node() const;
  /// UsageError unless this rank can hold `need` more bytes within mem_limit.
  void check_fits(const std::string& name, uint64_t need) const;
  /// This rank's part of a load, collective for transport mpi: ds's window (shared on one
  /// node), or plain memory for transport fabric.
  void allocate(detail::EmbeddedDataset& ds, uint64_t bytes) const;

  detail::EmbeddedDataset& find(const std::string& name) const;
  std::unique_ptr<detail::EmbeddedDataset> prepare(const std::filesystem::path& path,
                                                   std::string name) const;
  /// Collective: UsageError on every rank unless all ranks opened the same index.
  void check_same_index(const Index& index, const std::filesystem::path& path) const;
  void fill(detail::EmbeddedDataset& ds, bool verify) const;

  detail::MpiCommDup comm;  // declared first: freed after every window on it
  StoreOptions options;
  detail::TransportId transport;
  int rank = 0;
  int size = 1;
  int thread_level = 0;
  bool shared = false;  // shards in shared windows, read by memcpy from any rank
  uint64_t mem_limit = 0;
  std::string mem_limit_source = "StoreOptions::mem_limit";  // for the error that cites it
  std::unique_ptr<detail::EmbeddedFabric> fabric;  // before datasets: outlives their registrations
  // In load order, which is the same on every rank, so destruction frees the windows (a
  // collective) in the same order everywhere.
  std::vector<std::unique_ptr<detail::EmbeddedDataset>> datasets;
};

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

detail::EmbeddedDataset& Store::State::find(const std::string& name) const {
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
  auto index = Index::open(path, Index::Holding::copied);  // a training process: never SIGBUS
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
  if (transport == detail::TransportId::fabric) {
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
  static constexpr std::array allowed{detail::TransportId::mpi, detail::TransportId::fabric};
  const auto transport =
      *detail::parse_transport(options.transport, allowed, false, "StoreOptions::transport");
  if (options.max_round_bytes == 0 || options.max_round_bytes > static_cast<uint64_t>(INT_MAX)) {
    throw UsageError(fmt::format("max_round_bytes must be 1 to {} bytes, not {}", INT_MAX,
                                 options.max_round_bytes));
  }
  profile::configure(options.settings.get_string("profile"));
  m = std::make_unique<State>(fortran_comm, options, transport);
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
  detail::agree(failure, comm);
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
  detail::agree(failure, comm);
  const bool windowed = ds->window.get() != MPI_WIN_NULL;
  if (windowed) ds->window.lock_all();
  try {
    m->fill(*ds, verify);
  } catch (...) {
    failure = std::current_exception();
  }
  // Syncs around the agreeing collective order every rank's fill before any direct read.
  if (windowed) ds->window.sync();
  detail::agree(failure, comm);
  if (windowed) ds->window.sync();
  if (m->shared) {
    ds->direct = ds->window.shared_bases(m->size);
  } else {
    // Others' rows by MPI_Get or libfabric.
    ds->direct.assign(static_cast<std::size_t>(m->size), nullptr);
    ds->direct[static_cast<std::size_t>(m->rank)] = ds->region.data();
  }
  if (m->fabric)
    ds->registration =
        m->fabric->expose(ds->region, ds->layouts, ds->direct, ds->table.targets.remotes);
  ds->build_routes(m->options.settings);
  ds->table.allow_stale = m->options.allow_stale;
  m->datasets.push_back(std::move(ds));
}

const Index& Store::index(const std::string& name) const {
  return m->find(name).index;
}

Reader Store::reader(const std::string& name) const {
  const detail::EmbeddedDataset& ds = m->find(name);
  // The reader must not outlive the Store (documented): it shares the dataset without owning it.
  return Reader(std::make_unique<detail::BatchReader>(
      std::shared_ptr<const detail::RouteSource>(std::shared_ptr<void>(), &ds)));
}

namespace {

/// The checks get_batch_collective agrees on before any row moves; the field's id.
uint32_t check_collective(const Index& index, const std::string& field,
                          std::span<const uint64_t> ids, std::size_t dest_bytes) {
  const auto [f, need] = detail::check_batch(index, field, ids, dest_bytes);
  // MPI counts and displacements are int: a rank's whole batch must fit one.
  if (need > static_cast<uint64_t>(INT_MAX) || ids.size() > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError(
        fmt::format("a collective batch of {} ids, {} bytes is too large (under 2 GiB per rank per "
                    "call): split it",
                    ids.size(), need));
  }
  return f;
}

}  // namespace

void Store::get_batch_collective(const std::string& name, const std::string& field,
                                 std::span<const uint64_t> ids, std::span<std::byte> dest) {
  // Every rank must take part in every exchange, so bad input anywhere (a dataset not loaded
  // included) stops all ranks here, before the first all-to-all.
  detail::EmbeddedDataset* ds = nullptr;
  uint32_t f = 0;
  std::exception_ptr failure;
  try {
    ds = &m->find(name);
    f = check_collective(ds->index, field, ids, dest.size());
    if (!ds->exchange) ds->exchange.emplace(m->comm.get(), m->options.max_round_bytes);
  } catch (...) {
    failure = std::current_exception();
  }
  detail::BatchTimer timer;
  detail::agree(failure, m->comm.get());
  timer.mark(ProfileStage::other);
  timer.path("mpi-alltoall");
  const detail::ShardMap map{&ds->index, &ds->plan, &ds->layouts[static_cast<std::size_t>(m->rank)],
                             ds->region};
  ds->exchange->exchange(map, f, ids, dest.data());
  timer.mark(ProfileStage::completion_wait);
  timer.finish(ids.size(), dest.size());
}

void Store::fail_batch_collective(std::exception_ptr failure) {
  if (!failure)
    failure = std::make_exception_ptr(UsageError("fail_batch_collective without a failure"));
  detail::agree(failure, m->comm.get());
}

}  // namespace ddstage
