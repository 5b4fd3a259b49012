#include "bench/bench_fabric_raw.hpp"

#include <algorithm>
#include <exception>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#if DDSTAGE_HAVE_MPI
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"
#include "mpi/mpi_session.hpp"
#include "support/error_line.hpp"
#endif

namespace ddstage::cli {
namespace {

struct BenchFabricRawOptions {
  std::vector<std::string> sizes{"3K", "12.5K", "200K", "1M"};
  std::vector<uint64_t> batches{1, 128};
  uint64_t samples = 20000;
  std::string cell_bytes = "1G";
  uint64_t seed = 1;
  BenchOutputs out;
};

/// Target bytes: room for many rows of the largest size at random offsets, at least 64 MiB.
uint64_t target_bytes(const std::vector<uint64_t>& row_sizes) {
  return std::max<uint64_t>(64ull << 20,
                            16 * *std::max_element(row_sizes.begin(), row_sizes.end()));
}

/// The floor for every row size and batch, on rank 0 (no points elsewhere); provider: what the
/// reads went over.
std::vector<FloorPoint> measure_floor(const BenchFabricRawOptions& opts, const Settings& settings,
                                      const detail::MpiSession* job,
                                      const std::vector<uint64_t>& sizes, uint64_t cap,
                                      std::string& provider) {
  std::vector<FloorPoint> points;
  with_fabric_floor(settings, job, sizes, [&](FabricFloorReader& reader) {
    provider = reader.provider();
    for (uint64_t row_bytes : sizes) {
      const uint64_t rows = std::max<uint64_t>(1, std::min(opts.samples, cap / row_bytes));
      warm_fabric_floor(reader, row_bytes, rows, opts.seed);
      for (uint64_t batch : opts.batches)
        points.push_back({row_bytes, batch, reader.run(row_bytes, rows, batch, opts.seed)});
    }
  });
  return points;
}

void run_bench_fabric_raw(const BenchFabricRawOptions& opts, const CliContext& ctx) {
  std::vector<uint64_t> sizes;
  for (const auto& s : opts.sizes) {
    const auto v = parse_size(s);
    if (!v || *v == 0) throw UsageError("bad --size '" + s + "' (row sizes like 3K,12.5K,200K,1M)");
    sizes.push_back(*v);
  }
  if (std::find(opts.batches.begin(), opts.batches.end(), 0) != opts.batches.end()) {
    throw UsageError("--batch sizes must be > 0");
  }
  const auto cap = parse_size(opts.cell_bytes);
  if (!cap || *cap == 0)
    throw UsageError("bad --cell-bytes '" + opts.cell_bytes + "' (a size like 1G)");
  opts.out.check();
  const auto settings = ctx.resolve_settings();
  std::string provider;
#if DDSTAGE_HAVE_MPI
  const detail::MpiSession job(ctx.argc, ctx.argv, MPI_THREAD_FUNNELED);
  std::vector<FloorPoint> points;
  try {
    points = measure_floor(opts, settings, &job, sizes, *cap, provider);
  } catch (...) {
    // The line goes out before MPI_Finalize (job's destructor): past it the failed rank exits,
    // and mpiexec kills the ranks that have not printed theirs yet (rank 0's "rank 1: ..." was
    // lost that way on a busy machine). main's report of the same exception prints nothing new.
    report_exception(std::current_exception());
    throw;
  }
  if (job.rank() != 0) return;
  const int ranks = job.size();
#else
  const auto points = measure_floor(opts, settings, nullptr, sizes, *cap, provider);
  const int ranks = 1;
#endif
  BenchReport report("fabric-raw");
  report.describe("provider",
                  provider + (settings.get_string("fabric.domain").empty()
                                  ? ""
                                  : " in domain " + settings.get_string("fabric.domain")));
  report.describe("reads",
                  ranks > 1
                      ? "rank 0 reads a region registered by rank 1"
                      : "this process reads a region registered on a second endpoint of its own");
  report.describe(
      "window",
      fmt::format("{} reads, {} bytes in flight at most (fabric.window, fabric.inflight_bytes)",
                  settings.get_int("fabric.window"), settings.get_size("fabric.inflight_bytes")));
  report.describe("seed", std::to_string(opts.seed));
  for (const auto& p : points)
    report.add(floor_cell(p, {{"transport", "fabric-raw"}, {"provider", provider}}));
  report.note(
      "each call posts `batch` fi_reads at random offsets and waits for all of them: µs/row is the "
      "call's "
      "time over its reads");
  report.print();
  report.write(opts.out);
}

}  // namespace

void warm_fabric_floor(FabricFloorReader& reader, uint64_t row_bytes, uint64_t rows,
                       uint64_t seed) {
  reader.run(row_bytes, std::min<uint64_t>(rows, 256), 32, seed);
}

BenchCell floor_cell(const FloorPoint& p, std::vector<std::pair<std::string, BenchDim>> dims) {
  BenchCell c{.dims = std::move(dims)};
  c.dims.emplace_back("row_bytes", p.row_bytes);
  c.dims.emplace_back("batch", p.batch);
  c.rows = p.run.rows;
  c.bytes = p.run.bytes;
  c.seconds = p.run.seconds;
  c.ns_per_row = p.run.ns_per_row;
  return c;
}

void with_fabric_floor(const Settings& settings, const detail::MpiSession* job,
                       const std::vector<uint64_t>& row_sizes,
                       const std::function<void(FabricFloorReader&)>& read) {
#if DDSTAGE_HAVE_MPI
  if (job && job->size() > 1) {
    // Rank 1's address, or the error that kept it from serving one (the 64 MiB target's
    // bad_alloc too): every rank must learn either, or rank 0 would wait for an address forever.
    std::optional<FabricFloorTarget> target;
    const auto address = detail::root_outcome(
        [&] {
          target.emplace(settings, target_bytes(row_sizes));
          return target->address();
        },
        1, job->comm());
    std::exception_ptr failure;
    if (job->rank() == 0) {
      try {
        FabricFloorReader reader(settings, address);
        read(reader);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    // The other ranks wait here while rank 0 measures (an MPI_Ibarrier matches no MPI_Barrier:
    // every rank waits the same way), also when it failed.
    detail::barrier_gently(job->comm());
    if (failure) std::rethrow_exception(failure);
    return;
  }
#else
  (void)job;
#endif
  const FabricFloorTarget target(settings, target_bytes(row_sizes));
  FabricFloorReader reader(settings, target.address());
  read(reader);
}

void setup_bench_fabric_raw(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchFabricRawOptions>();
  auto* s = bench.add_subcommand(
      "fabric-raw", "The raw fi_read loop: the floor under fabric reads, per row size");
  s->add_option("--size", opts->sizes, "Row sizes, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--batch", opts->batches, "Reads per call (each call waits for all of them)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--samples", opts->samples, "Reads per cell")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  s->add_option("--cell-bytes", opts->cell_bytes, "Bytes a cell reads at most (reads cut to fit)")
      ->capture_default_str();
  s->add_option("--seed", opts->seed, "Seed for the random offsets")->capture_default_str();
  add_setting_option(*s, ctx, "--provider", "fabric.provider",
                     "libfabric provider (tcp, shm, cxi, verbs, ...)");
  add_bench_output_options(*s, opts->out);
  s->callback([opts, &ctx] { run_bench_fabric_raw(*opts, ctx); });
}

}  // namespace ddstage::cli
