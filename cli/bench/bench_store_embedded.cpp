// `bench store --synthetic / --index`: the Store embedded in this MPI job (one process, or every
// rank of an mpiexec/srun job), read over each transport the matrix asks for.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/bench_fabric_raw.hpp"
#include "bench/bench_store.hpp"
#include "bench/synthetic_dataset.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#if DDSTAGE_HAVE_MPI
#include "ddstage/mpi.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"
#include "mpi/mpi_session.hpp"
#endif
#include "transport/transport_registry.hpp"

namespace ddstage::cli {
namespace {

constexpr detail::TransportId embedded_transports[] = {
    detail::TransportId::shm, detail::TransportId::mpi, detail::TransportId::fabric};

/// The registry's transport a way reads by, its name checked without a probe: mpi-alltoall is
/// the mpi transport read collectively, fabric:PROVIDER the fabric transport over one provider.
detail::TransportId transport_of(const std::string& way) {
  if (way == "mpi-alltoall") return detail::TransportId::mpi;
  const auto colon = way.find(':');
  const auto id = *detail::parse_transport_name(way.substr(0, colon), embedded_transports, false,
                                                "--transport");
  if (colon != std::string::npos && id != detail::TransportId::fabric)
    throw UsageError("bad --transport '" + way + "': only fabric takes a :PROVIDER");
  return id;
}

/// The ways the user named (none: the default matrix), checked by name before MPI starts.
std::vector<std::string> named_ways(const BenchStoreOptions& opts) {
  for (const auto& way : opts.transports) transport_of(way);
  return opts.transports;
}

/// Row sizes of --synthetic, checked.
std::vector<uint64_t> synthetic_sizes(const BenchStoreOptions& opts) {
  std::vector<uint64_t> sizes;
  for (const auto& s : opts.synthetic) {
    const auto v = parse_size(s);
    if (!v || *v == 0)
      throw UsageError("bad --synthetic size '" + s + "' (row sizes like 3K,12.5K,200K,1M)");
    sizes.push_back(*v);
  }
  return sizes;
}

#if DDSTAGE_HAVE_MPI

/// A directory for generated datasets, made by rank 0 and named to every rank (which must all
/// see it: on several nodes, TMPDIR on a shared file system); rank 0 removes it. When rank 0
/// cannot make it, every rank throws its error.
class SharedTempDir {
 public:
  explicit SharedTempDir(const detail::MpiSession& job)
      : m_owner(job.rank() == 0), m_path(detail::root_outcome(make, 0, job.comm())) {}
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  ~SharedTempDir() {
    std::error_code ec;
    if (m_owner) std::filesystem::remove_all(m_path, ec);
  }
  const std::filesystem::path& path() const noexcept { return m_path; }

 private:
  static std::string make() {
    std::error_code ec;
    const auto tmp = std::filesystem::temp_directory_path(ec);
    if (ec) {
      // TMPDIR naming no directory is the user's to fix: a usage error naming it (the
      // variables are libstdc++'s, in its order).
      for (const char* var : {"TMPDIR", "TMP", "TEMP", "TEMPDIR"}) {
        if (const char* dir = std::getenv(var)) {
          throw IoError("temporary directory " + std::string(dir) + " (" + var + ")", ec.value());
        }
      }
      throw IoError("temporary directory", ec.value());
    }
    std::string path = (tmp / "ddstage-bench-XXXXXX").string();
    if (!::mkdtemp(path.data())) throw IoError("mkdtemp " + path, errno);
    return path;
  }

  bool m_owner;
  std::filesystem::path m_path;
};

/// A get_batch (or collective) reader of an embedded dataset, its destination buffer its own.
ReadFn store_read(Store& store, std::string name, std::string field, bool collective) {
  return [&store, reader = std::make_shared<Reader>(store.reader(name)), name = std::move(name),
          field = std::move(field), collective,
          dest = std::vector<std::byte>()](std::span<const uint64_t> ids) mutable {
    const uint64_t bytes = reader->batch_bytes(field, ids);
    if (dest.size() < bytes) dest.resize(bytes);
    if (collective) {
      store.get_batch_collective(name, field, ids, std::span(dest).first(bytes));
    } else {
      reader->get_batch(field, ids, std::span(dest).first(bytes));
    }
    return bytes;
  };
}

/// The Store a way reads through: shm shares one window per node, mpi and mpi-alltoall use
/// MPI_Get and the collective, fabric:P reads other ranks over libfabric provider P.
std::string store_of(const std::string& way) {
  return way == "mpi-alltoall" ? "mpi" : way;
}

StoreOptions store_options(const std::string& store, const CliContext& ctx) {
  StoreOptions o;
  if (store == "shm") return o;
  o.direct_on_node = false;
  if (store == "mpi") return o;
  CliContext c = ctx;
  const auto colon = store.find(':');
  if (colon != std::string::npos) c.setting_flags["fabric.provider"] = store.substr(colon + 1);
  o.transport = "fabric";
  o.settings = c.resolve_settings();
  return o;
}

/// Collective: one Store per store the ways read through.
std::map<std::string, Store> open_stores(const std::vector<std::string>& ways,
                                         const CliContext& ctx) {
  std::map<std::string, Store> stores;
  for (const auto& way : ways) {
    const auto key = store_of(way);
    if (!stores.count(key))
      stores.emplace(key, make_store(MPI_COMM_WORLD, store_options(key, ctx)));
  }
  return stores;
}

/// One dataset (a generated row size or the real index) loaded into every Store and measured.
struct EmbeddedRun {
  const BenchStoreOptions& opts;
  const CliContext& ctx;
  const detail::MpiSession& job;
  std::vector<std::string> ways;
  BenchReport& report;

  /// Collective. The Stores hold only this dataset and go (collectively) at the end: the
  /// Store cannot unload, and sizes kept loaded side by side would add up towards mem_limit.
  void measure(const std::filesystem::path& ddx, const std::string& name, bool profile_overhead) {
    auto stores = open_stores(ways, ctx);
    for (auto& [key, store] : stores) store.load(ddx, name);
    const Index& index = stores.begin()->second.index(name);
    const uint32_t field = opts.field.empty() ? index.default_field() : index.field_id(opts.field);
    const auto field_name = index.fields()[field].name;
    // Each rank reads its own random rows, the same number on every rank: collectives match.
    const auto rows = pick_rows(index, field, opts, opts.seed + static_cast<uint64_t>(job.rank()));
    const unsigned max_threads = *std::max_element(opts.threads.begin(), opts.threads.end());
    std::vector<StoreWay> store_ways;
    for (const auto& way : ways) {
      const bool collective = way == "mpi-alltoall";
      // Concurrent MPI calls from several threads need MPI_THREAD_MULTIPLE.
      const bool single = collective || (way == "mpi" && !job.multiple());
      auto make = [&] {
        return store_read(stores.at(store_of(way)), name, field_name, collective);
      };
      store_ways.push_back({way, collective ? "get_batch_collective" : "get_batch",
                            warmed_readers(single ? 1 : max_threads, make, rows.ids), single});
    }
    // A rank done with a cell sleeps until the others are: spinning in MPI_Barrier would take
    // a core from a rank still reading (or serving) on a node with fewer cores than ranks.
    MatrixRun run{rows.row_bytes, rows.ids, [&job = job] { detail::barrier_gently(job.comm()); },
                  [&rows](unsigned) { return rows.floor->reader(); }};
    run.profile_overhead = profile_overhead;
    measure_matrix(report, opts, run, store_ways);
    for (const auto& way : store_ways) {
      if (way.transport.starts_with("fabric"))
        pair_with_raw_floor(way, index, rows.row_bytes, rows.ids.size());
    }
  }

  /// Collective: x_raw of a fabric way. Rank 0 reads rank 1's rows only, alternating with the
  /// raw fi_read floor against rank 1 (with_fabric_floor's target), while rank 1 and the others
  /// wait in one gentle barrier for both. One rank has no remote rows: no x_raw.
  void pair_with_raw_floor(const StoreWay& way, const Index& index, uint64_t row_bytes,
                           uint64_t rows) {
    if (job.size() < 2) return;
    const FloorPairing pairing{
        "rank 1", ids_in(ShardPlan::balance(index, job.size()).range(1), rows, opts.seed)};
    if (pairing.ids.empty()) return;  // rank 1 holds no rows: every rank skips alike
    with_fabric_floor(store_options(way.transport, ctx).settings, &job, {row_bytes},
                      [&](FabricFloorReader& reader) {
                        pair_with_floor(report, way, pairing, reader, row_bytes, opts.batches,
                                        opts.seed);
                      });
  }
};

void describe_run(BenchReport& report, const BenchStoreOptions& opts, const detail::MpiSession& job,
                  const std::vector<std::string>& ways) {
  report.describe("mode", "embedded: a Store in this MPI job");
  report.describe(
      "ranks",
      std::to_string(job.size()) +
          (job.size() == 1 ? " (every row is this rank's own: run under mpiexec -n 2 or more to "
                             "measure the transports)"
                           : ""));
  report.describe("transports", fmt::format("{}", fmt::join(ways, ",")));
  report.describe("dataset", opts.index.empty() ? fmt::format("synthetic rows of {} bytes",
                                                              fmt::join(opts.synthetic, ","))
                                                : opts.index);
  report.describe("seed", fmt::format("{} (rank r reads rows drawn with seed + r)", opts.seed));
  report.describe("figures",
                  "rank 0's; every rank reads at the same time, cell by cell, except the cells "
                  "with a peer (rank 0 alone reads)");
}

/// Collective: the ways to measure. Availability is asked only now, after MPI_Init (which may
/// set the FI_* variables libfabric reads once): a named way this node cannot use is a usage
/// error on every rank, worded as `info` words it; the default matrix reads over libfabric
/// where every rank can.
std::vector<std::string> available_ways(std::vector<std::string> ways,
                                        const detail::MpiSession& job) {
  if (!ways.empty()) {
    detail::agree(detail::caught([&] {
                    for (const auto& way : ways)
                      detail::check_transport_available(transport_of(way), "--transport");
                  }),
                  job.comm());
    return ways;
  }
  ways = {"shm", "mpi", "mpi-alltoall"};
  const int here = detail::transport_entry(detail::TransportId::fabric).probe().available;
  int everywhere = 0;
  detail::mpi_check(MPI_Allreduce(&here, &everywhere, 1, MPI_INT, MPI_MIN, job.comm()),
                    "MPI_Allreduce");
  if (everywhere) ways.emplace_back("fabric");
  return ways;
}

/// Ends every rank after this rank failed alone (the others wait in a collective).
[[noreturn]] void abort_job(const detail::MpiSession& job, const char* what, int code) {
  std::fprintf(stderr, "ddstage: error: rank %d: %s\n", job.rank(), what);
  job.abort(code);
}

#endif

}  // namespace

void run_bench_store_embedded(const BenchStoreOptions& opts, const CliContext& ctx) {
  const auto named = named_ways(opts);
  const auto sizes = synthetic_sizes(opts);
  if (!opts.index.empty() && !sizes.empty())
    throw UsageError("bench store takes --synthetic or --index, not both");
#if DDSTAGE_HAVE_MPI
  ctx.resolve_settings();
  // Readers in several threads make MPI calls at once (transport mpi).
  const detail::MpiSession job(ctx.argc, ctx.argv, MPI_THREAD_MULTIPLE);
  const auto ways = available_ways(named, job);
  BenchReport report("store");
  describe_run(report, opts, job, ways);
  try {
    EmbeddedRun run{opts, ctx, job, ways, report};
    if (!opts.index.empty()) {
      run.measure(opts.index, "bench", true);
    } else {
      // Outlives every Store: its files stay while a Store maps them.
      const SharedTempDir dir(job);
      // The profile's overhead is claimed at 3 KB rows: measured on the size nearest to it.
      const uint64_t nearest_3k =
          *std::min_element(sizes.begin(), sizes.end(), [](uint64_t a, uint64_t b) {
            return std::max(a, 3072ul) - std::min(a, 3072ul) <
                   std::max(b, 3072ul) - std::min(b, 3072ul);
          });
      for (uint64_t row_bytes : sizes) {
        const uint64_t rows =
            opts.synthetic_rows ? opts.synthetic_rows : default_synthetic_rows(row_bytes);
        // Rank 0 writes, the others wait for it to have written or to have failed.
        detail::root_outcome(
            [&] {
              write_synthetic_dataset(dir.path(), row_bytes, rows, opts.seed);
              return std::string();
            },
            0, job.comm());
        run.measure(dir.path() / fmt::format("rows-{}.ddx", row_bytes),
                    fmt::format("rows-{}", row_bytes), row_bytes == nearest_3k);
      }
      detail::mpi_check(MPI_Barrier(job.comm()), "MPI_Barrier");
    }
  } catch (const Error& e) {
    // Usage errors come from checks every rank makes alike, or are agreed on (the Store's
    // collectives, the steps only rank 0 takes), so every rank unwinds together. A rank
    // failing alone at run time would leave the others waiting in the next collective: end
    // the job.
    if (job.size() > 1 && e.kind() == ErrorKind::runtime)
      abort_job(job, e.what(), exit_code(e.kind()));
    throw;
  } catch (const std::exception& e) {
    if (job.size() > 1) abort_job(job, e.what(), 1);
    throw;
  } catch (...) {
    if (job.size() > 1) abort_job(job, "an exception that is not a std::exception", 1);
    throw;
  }
  if (job.rank() != 0) return;
  add_matrix_notes(report);
  report.print();
  report.write(opts.out);
#else
  (void)ctx;
  throw UsageError(
      "bench store --synthetic/--index needs MPI: this ddstage was built with "
      "DDSTAGE_WITH_MPI=OFF");
#endif
}

}  // namespace ddstage::cli
