// `ddstage bench store`: get_batch over a matrix of transports, row sizes, batch sizes, threads
// and reader sharing, against a memcpy floor (and, for fabric, the raw fi_read floor) measured
// in the same run. Served (a running store) or embedded (a Store in this MPI job).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_engine.hpp"
#include "bench/bench_fabric_raw.hpp"
#include "bench/bench_report.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

struct BenchStoreOptions {
  std::string store;    ///< served: the store directory
  std::string dataset;  ///< served: the loaded dataset
  std::string field;    ///< the field read (required when there are several)
  std::vector<std::string>
      synthetic;      ///< embedded: row sizes of generated datasets ("3K", "12.5K")
  std::string index;  ///< embedded: a real dataset's index
  std::vector<std::string> transports;  ///< empty: the defaults of the mode
  std::vector<uint64_t> batches{1, 128};
  std::vector<unsigned> threads{1};
  std::vector<std::string> sharing{"own"};
  uint64_t samples = 20000;
  std::string cell_bytes = "1G";
  uint64_t synthetic_rows = 0;  ///< 0: enough rows for 128 MiB per size
  uint64_t seed = 1;
  bool profile = false;  ///< the read profile per cell, and its overhead
  /// Served: destinations, "host" and/or "gpu"; gpu cells run once per --gpu-path.
  std::vector<std::string> dests{"host"};
  std::vector<std::string> gpu_paths{"direct", "staged"};
  int gpu = 0;  ///< the device of gpu cells
  BenchOutputs out;
};

void setup_bench_store(CLI::App& bench, CliContext& ctx);
void run_bench_store(const BenchStoreOptions& opts, const CliContext& ctx);
/// Embedded mode (bench_store_embedded.cpp): a Store in this MPI job, synthetic or real rows.
void run_bench_store_embedded(const BenchStoreOptions& opts, const CliContext& ctx);

/// One way of reading a dataset in the matrix: a transport, the call it makes, and its readers
/// (reader(t) for thread t, already warmed up).
struct StoreWay {
  std::string transport;  ///< "shm", "mpi", "fabric:tcp", ...
  std::string mode;       ///< "get_batch", "get_batch_collective"
  std::function<ReadFn(unsigned thread)> reader;
  /// Only one thread per rank may call it (a collective).
  bool single_thread = false;
  /// "host", "gpu:direct", "gpu:staged" when the run asked for destinations (--dest); empty:
  /// host, and no dest column.
  std::string dest;
};

/// What the matrix needs besides the ways: the rows, the figures' floors and a hook run
/// before every cell (a barrier, so all ranks measure the same cell together).
struct MatrixRun {
  uint64_t row_bytes = 0;
  std::span<const uint64_t> ids;
  std::function<void()> before_cell = [] {};
  /// memcpy of the same rows (the floor for shared memory): a reader for thread t.
  std::function<ReadFn(unsigned thread)> floor;
  /// With --profile: measure the profile's own cost on these rows (the dataset nearest 3 KB).
  bool profile_overhead = false;
};

/// The rows of one field a bench reads: the mean row size, every cell's random ids, and the
/// memcpy floor over the same rows.
struct FieldRows {
  uint64_t row_bytes = 0;
  std::vector<uint64_t> ids;
  std::shared_ptr<const MemcpyFloor> floor;
};
/// cell_rows() ids of the field drawn with seed; index must outlive the floor.
FieldRows pick_rows(const Index& index, uint32_t field, const BenchStoreOptions& opts,
                    uint64_t seed);
/// count readers from make(), warmed up on ids: reader(t) of a StoreWay.
std::function<ReadFn(unsigned)> warmed_readers(unsigned count, const std::function<ReadFn()>& make,
                                               std::span<const uint64_t> ids);

/// A fabric way against the raw fi_read floor with the same peer, for x_raw: get_batch of rows
/// of one remote rank only, each batch measured right after the floor's reads of that rank's
/// memory, in the same phase (the peer and every other rank waiting as they waited for the
/// floor), so that neither the reader's own rows (a memcpy) nor a busy or spinning peer enter
/// the ratio.
struct FloorPairing {
  std::string peer;           ///< "rank 1": whose memory the floor and the way's reads reach
  std::vector<uint64_t> ids;  ///< random rows of the peer's shard, as many as the floor reads
};

/// count random ids of range drawn with seed (none when the range is empty).
std::vector<uint64_t> ids_in(ShardRange range, uint64_t count, uint64_t seed);

/// x_raw's cells at row_bytes, reader reaching the peer's memory: per batch, rounds that
/// alternate the floor and get_batch of a share of the pairing's rows in whole batches (which
/// goes first flips every round, so that a drift of the machine falls on both alike), merged
/// into the floor's cell (transport fabric-raw[:P], with the provider) and get_batch's (with
/// x_raw), both with dimension peer, into report; a note instead where the rows are fewer
/// than one batch.
void pair_with_floor(BenchReport& report, const StoreWay& way, const FloorPairing& pairing,
                     FabricFloorReader& reader, uint64_t row_bytes,
                     const std::vector<uint64_t>& batches, uint64_t seed);

/// Measures every (way, batch, threads, sharing) cell and the floor for each batch, into report;
/// with --profile, each cell's read profile, and the profile's overhead when run asks for it.
void measure_matrix(BenchReport& report, const BenchStoreOptions& opts, const MatrixRun& run,
                    const std::vector<StoreWay>& ways);

/// Rows a cell reads: --samples, cut to --cell-bytes of rows of this size (at least one).
uint64_t cell_rows(const BenchStoreOptions& opts, uint64_t row_bytes);
/// Checks the matrix flags (batch sizes, threads, sharing) and outputs before anything runs.
void check_matrix_options(const BenchStoreOptions& opts);
/// Notes saying what x_floor and x_raw compare, and each way's largest batch against its
/// smallest.
void add_matrix_notes(BenchReport& report);

}  // namespace ddstage::cli
