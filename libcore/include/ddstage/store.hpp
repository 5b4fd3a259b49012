// The embedded store: every rank of an MPI job holds a shard of each dataset and reads any row
// with MPI RMA, or all ranks exchange rows together. No MPI header here (see ddstage/mpi.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "ddstage/client.hpp"
#include "ddstage/device_buffer.hpp"
#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"

namespace ddstage {

/// Settings of an embedded Store.
struct StoreOptions {
  /// get_batch_collective: most bytes one rank sends in one all-to-all round (a single larger
  /// row goes alone in its round). Bounded rounds beat one unbounded exchange (2-8 MiB best in
  /// the seed measurements). 1 byte to 2 GiB - 1.
  uint64_t max_round_bytes = 4ull << 20;
  /// When every rank is on one node, put the shards in one MPI shared-memory window
  /// (MPI_Win_allocate_shared) and read any rank's rows with a plain memcpy. false, or ranks on
  /// several nodes: MPI_Win_allocate and MPI_Get (the MPI library's own path: with OpenMPI's
  /// osc/rdma a same-node get costs ~1 µs unloaded, ~100 µs when ranks outnumber cores).
  /// Transport "mpi" only: a fabric Store makes no MPI window.
  bool direct_on_node = true;
  /// load: skip the origin files' size/mtime check.
  bool allow_stale = false;
  /// Bytes of shard regions each rank may hold, over all its datasets; a load that would pass
  /// it is refused on every rank before anything is allocated. 0: 80% of the node's available
  /// memory at construction, or the free space of /dev/shm if less, divided by the Store's
  /// ranks on that node (the refusal says which bound applied).
  uint64_t mem_limit = 0;
  /// How get_batch reaches rows this process does not address directly: "mpi" (MPI_Get) or
  /// "fabric" (libfabric fi_read: every rank opens an endpoint and registers its shards, the
  /// addresses and keys are allgathered; provider, domain, window and read_timeout come from
  /// `settings`). get_batch_collective always uses MPI (two-sided). With "fabric" the shards
  /// are plain memory registered with libfabric and the Store creates no MPI window, so it
  /// needs no one-sided MPI: it works across nodes where MPI reaches only over TCP (OpenMPI's
  /// tcp BTL: osc/rdma fails MPI_Win_allocate with MPI_ERR_WIN, and osc/pt2pt refuses
  /// MPI_THREAD_MULTIPLE, which mpi4py asks for), at any thread level. This rank's rows are
  /// copied; every other rank's, on this node or not, come over libfabric.
  std::string transport = "mpi";
  Settings settings;
};

/// Shards of datasets held by the ranks of an MPI communicator (DDStore style). The app
/// initialises MPI; the Store works on its own duplicate of the communicator. Construction,
/// load() and destruction are collective: every rank calls them, in the same order, and the
/// Store must be destroyed before MPI_Finalize. Errors from collective calls are thrown on
/// every rank alike, naming the rank that failed.
///
/// Threads: get_batch from readers in several threads of one rank makes concurrent MPI calls
/// (MPI_Get, flush) and needs MPI initialised with MPI_THREAD_MULTIPLE (MPI_Init_thread);
/// thread_level() tells what MPI provides. The exceptions make no MPI call in get_batch: a
/// shared window (direct_on_node, all ranks on one node: memcpy only) and transport "fabric"
/// (each Reader has its own libfabric endpoint). The Store
/// itself (load, reader()) and get_batch_collective are for one thread per rank at a time.
class Store {
 public:
  /// comm as its Fortran handle (MPI_Comm_c2f), so that this header needs no mpi.h: C++ apps
  /// use make_store(MPI_Comm) from ddstage/mpi.hpp. UsageError when MPI is not initialised or
  /// options are out of range.
  explicit Store(int fortran_comm, StoreOptions options = {});
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  /// Collective: frees every dataset's window (transport mpi).
  ~Store();

  int rank() const noexcept;
  int size() const noexcept;
  /// MPI_Query_thread's answer (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE as ints).
  int thread_level() const noexcept;

  /// Collective. Every rank opens the index, takes its contiguous byte-balanced share
  /// (ShardPlan::balance over the communicator's size), allocates it (in an MPI window for
  /// transport mpi, plain memory for fabric) and fills it from origin (with verify, checking every
  /// entry's checksum). A shard that would pass a rank's mem_limit is a UsageError naming rank,
  /// host, bytes needed and free, raised before any rank allocates. If any rank fails, every rank
  /// throws the first failing rank's error and nothing of the dataset remains. name defaults to the
  /// index's dataset name; a name already loaded is a UsageError.
  void load(const std::filesystem::path& index, const std::string& name = "", bool verify = false);
  /// A loaded dataset's index; UsageError listing the loaded names when there is none.
  const Index& index(const std::string& name) const;
  /// A reader of a loaded dataset for the calling thread; it must not outlive the Store. The
  /// same Reader a Client's Dataset gives: this rank's rows (every rank's, with direct_on_node
  /// on one node) are copied, other ranks' rows fetched with MPI_Get (one get per run of
  /// consecutive samples of one rank, one flush per batch) or libfabric (transport "fabric").
  /// Its device get_batch goes direct only when every rank of the batch is addressed directly
  /// (one rank, or direct_on_node on one node); other rows are staged through its pinned
  /// host buffer. Bad input is a UsageError before anything is read.
  Reader reader(const std::string& name) const;

  /// Collective over the Store's ranks: every rank calls it at the same point with its own ids
  /// (possibly none) for dataset `name` and gets them as Reader::get_batch would. Requests are
  /// exchanged all-to-all, owners pack their rows and the rows travel back in rounds of at most
  /// max_round_bytes sent per rank. Bad input on any rank (dataset not loaded, unknown field, id
  /// out of range, wrong dest size, a batch of 2 GiB or more) is a UsageError thrown on every
  /// rank before any row moves. One thread per rank at a time.
  void get_batch_collective(const std::string& name, const std::string& field,
                            std::span<const uint64_t> ids, std::span<std::byte> dest);
  /// Takes get_batch_collective's place on a rank whose request failed before it could make
  /// one (a binding that converts ids and sizes the destination first): the same collective
  /// step, so every rank throws as get_batch_collective does for bad input, this rank
  /// `failure` itself, and no rank waits for the others in the exchange.
  void fail_batch_collective(std::exception_ptr failure);

 private:
  struct State;
  std::unique_ptr<State> m;
};

}  // namespace ddstage
