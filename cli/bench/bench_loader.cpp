#include "bench/bench_loader.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/page_cache.hpp"
#include "bench/training_loop.hpp"
#include "ddstage/client.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "support/progress_line.hpp"
#include "support/store_access.hpp"
#if DDSTAGE_HAVE_HDF5
#include "ddstage/formats/hdf5_sample_reader.hpp"
#endif

namespace ddstage::cli {
namespace {

/// Bytes of a batch laid out field after field, each field's rows in the order of ids.
uint64_t batch_bytes(const Index& index, std::span<const uint32_t> fields,
                     std::span<const uint64_t> ids) {
  uint64_t bytes = 0;
  for (uint32_t f : fields) {
    for (uint64_t id : ids) bytes += index.entry(id, f).length;
  }
  return bytes;
}

/// get_batch from a running store, one call per field.
class StoreBatches final : public BatchSource {
 public:
  StoreBatches(const Dataset& dataset, std::span<const uint32_t> fields)
      : m_reader(dataset.reader()) {
    for (uint32_t f : fields) m_names.push_back(dataset.index().fields()[f].name);
  }
  void read(std::span<const uint64_t> ids, std::vector<std::byte>& out) override {
    m_bytes.clear();
    for (const auto& name : m_names) m_bytes.push_back(m_reader.batch_bytes(name, ids));
    out.resize(std::accumulate(m_bytes.begin(), m_bytes.end(), uint64_t{0}));
    uint64_t at = 0;
    for (std::size_t f = 0; f < m_names.size(); at += m_bytes[f++]) {
      m_reader.get_batch(m_names[f], ids, std::span(out).subspan(at, m_bytes[f]));
    }
  }

 private:
  Reader m_reader;
  std::vector<std::string> m_names;
  std::vector<uint64_t> m_bytes;  // per field, this batch
};

/// The origin files through the index: OriginReader's sorted, coalesced preads per field.
class OriginBatches final : public BatchSource {
 public:
  OriginBatches(const Index& index, std::span<const uint32_t> fields, bool allow_stale)
      : m_index(index),
        m_fields(fields),
        m_reader(index, {.verify = false, .allow_stale = allow_stale}) {}
  void read(std::span<const uint64_t> ids, std::vector<std::byte>& out) override {
    out.resize(batch_bytes(m_index, m_fields, ids));
    uint64_t at = 0;
    for (uint32_t f : m_fields) {
      const uint64_t bytes = m_reader.batch_bytes(f, ids);
      m_reader.read(f, ids, std::span(out).subspan(at, bytes));
      at += bytes;
    }
  }

 private:
  const Index& m_index;
  std::span<const uint32_t> m_fields;
  OriginReader m_reader;
};

#if DDSTAGE_HAVE_HDF5
/// The HDF5 API per sample and field, as a plain Dataset class does. One HDF5 call at a time
/// across the workers, opening and closing included: the library is not thread-safe (h5py
/// holds one lock for the same reason).
class Hdf5Batches final : public BatchSource {
 public:
  Hdf5Batches(const Index& index, std::span<const uint32_t> fields, std::mutex& library)
      : m_index(index), m_fields(fields), m_library(library) {
    std::lock_guard lock(m_library);
    m_reader.emplace(index);
  }
  Hdf5Batches(const Hdf5Batches&) = delete;
  Hdf5Batches& operator=(const Hdf5Batches&) = delete;
  ~Hdf5Batches() override {
    std::lock_guard lock(m_library);
    m_reader.reset();
  }
  void read(std::span<const uint64_t> ids, std::vector<std::byte>& out) override {
    out.resize(batch_bytes(m_index, m_fields, ids));
    auto rest = std::span(out);
    for (uint32_t f : m_fields) {
      for (uint64_t id : ids) {
        std::lock_guard lock(m_library);
        rest = rest.subspan(m_reader->read(id, f, rest));
      }
    }
  }

 private:
  const Index& m_index;
  std::span<const uint32_t> m_fields;
  std::mutex& m_library;
  std::optional<formats::Hdf5SampleReader> m_reader;
};
#endif

/// One mode's figures, or why it could not run.
struct ModeRun {
  std::string mode;
  std::string unavailable;
  TrainingLoopResult result;
};

/// Checks every row of a batch against the index checksum: a fast wrong answer cannot win.
BatchCheck checksum_check(const Index& index, std::span<const uint32_t> fields) {
  // Compares only: freshness is checked (or allowed) where the loop reads.
  auto checker = std::make_shared<OriginReader>(index, OriginReaderOptions{.allow_stale = true});
  return
      [&index, fields, checker](std::span<const uint64_t> ids, std::span<const std::byte> batch) {
        uint64_t bad = 0;
        uint64_t at = 0;
        for (uint32_t f : fields) {
          for (uint64_t id : ids) {
            const Entry e = index.entry(id, f);
            bad += at + e.length > batch.size() ||
                   !checker->check_row(id, f, batch.subspan(at, e.length));
            at += e.length;
          }
        }
        return bad;
      };
}

std::vector<std::string> checked_compare(const BenchLoaderOptions& opts) {
  std::vector<std::string> modes;
  auto wanted = opts.compare;
  if (wanted.empty() && opts.store.empty()) wanted = {"origin", "hdf5"};
  for (const auto& m : wanted) {
    if (m != "origin" && m != "hdf5")
      throw UsageError(fmt::format("unknown --compare mode '{}' (origin, hdf5)", m));
    if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
  }
  return modes;
}

void check_sources(const BenchLoaderOptions& opts) {
  if (opts.store.empty() && opts.index.empty()) {
    throw UsageError(
        "give --store DIR --dataset NAME, or --index DATASET.ddx for origin modes only");
  }
  if (!opts.store.empty() && opts.dataset.empty()) throw UsageError("--store needs --dataset NAME");
  if (opts.store.empty() && !opts.dataset.empty()) throw UsageError("--dataset needs --store DIR");
}

std::vector<uint32_t> field_ids(const Index& index, const std::vector<std::string>& names) {
  std::vector<uint32_t> ids;
  for (const auto& name : names) ids.push_back(index.field_id(name));
  if (names.empty()) {
    for (uint32_t f = 0; f < index.fields().size(); ++f) ids.push_back(f);
  }
  return ids;
}

/// Runs the loop with progress on stderr when it is a terminal.
ModeRun run_mode(std::string mode, const TrainingLoopOptions& loop, std::span<const uint64_t> ids,
                 const BatchSourceFactory& sources, const BatchCheck& check,
                 const Settings& settings) {
  ProgressLine line(fmt::format("loader {}", mode), settings);
  double shown = -1;
  auto progress = [&](uint64_t done, uint64_t bytes, double seconds) {
    if (seconds - shown < 0.2 && done < loop.steps) return;
    shown = seconds;
    line({.items_done = done,
          .total_items = loop.steps,
          .bytes_done = bytes,
          .seconds = seconds,
          .final = done == loop.steps});
  };
  return {std::move(mode), "", run_training_loop(loop, ids, sources, check, progress)};
}

double fraction(uint64_t n, uint64_t of) {
  return of ? static_cast<double>(n) / static_cast<double>(of) : 0;
}

struct RunDescription {
  std::string dataset;
  uint64_t samples = 0;
  std::vector<std::string> fields;
  uint64_t per_epoch = 0;  // steps in one epoch
  bool cold = true;
  bool origin_modes = false;
};

/// A mode's cell: rows are samples, latencies the trainer's wait per step.
BenchCell cell_of(const ModeRun& run, uint64_t per_epoch) {
  const auto& r = run.result;
  BenchCell c{
      .dims = {{"mode", run.mode}}, .rows = r.samples, .bytes = r.bytes, .seconds = r.seconds};
  c.ns_per_row = r.wait_ns;
  c.extras = {
      {"samples_per_s", static_cast<double>(r.samples) / r.seconds},
      {"epoch_s", r.seconds / static_cast<double>(r.steps) * static_cast<double>(per_epoch)},
      {"over_100ms", fraction(r.waits_over_short, r.steps)},
      {"over_1s", fraction(r.waits_over_long, r.steps)},
      {"mismatches", static_cast<double>(r.mismatches)}};
  return c;
}

/// An origin mode against the store: how much longer an epoch takes and how much worse the
/// wait tail is, as extras of its cell and a note.
void compare_with_store(BenchReport& report, BenchCell& cell, const ModeRun& run,
                        const TrainingLoopResult& store) {
  auto over = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const auto& r = run.result;
  const double epoch = over(r.seconds, store.seconds);
  const double mean = over(r.wait_ns.mean(), store.wait_ns.mean());
  const double p99 = over(static_cast<double>(r.wait_ns.percentile(0.99)),
                          static_cast<double>(store.wait_ns.percentile(0.99)));
  cell.extras.emplace_back("epoch_vs_store", epoch);
  cell.extras.emplace_back("p99_vs_store", p99);
  report.note(fmt::format(
      "{} vs store: epoch {:.2f}x as long, wait mean {:.1f}x, wait p99 {:.1f}x; steps waiting "
      "> 1 s: {:.1f}% vs {:.1f}%",
      run.mode, epoch, mean, p99, 100 * fraction(r.waits_over_long, r.steps),
      100 * fraction(store.waits_over_long, store.steps)));
}

BenchReport loader_report(const BenchLoaderOptions& opts, const RunDescription& d,
                          const std::vector<ModeRun>& runs) {
  BenchReport report("loader", "step");
  // What decides between the modes (ddstage-bench(1)): the wait tail and the share of steps
  // that stall the trainer, then what that costs an epoch.
  report.set_panels(
      {{"wait per step, µs", {{"mean_us", "mean"}, {"p99_us", "p99"}}},
       {"steps waiting longer, %", {{"over_100ms", "> 100 ms"}, {"over_1s", "> 1 s"}}, 100, false},
       {"epoch, seconds", {{"epoch_s", "epoch"}}}});
  report.describe("dataset", fmt::format("{} ({} samples), fields {}", d.dataset, d.samples,
                                         fmt::join(d.fields, ",")));
  report.describe(
      "loop",
      fmt::format("batch {}, {} steps ({:.2f} epochs of {}, global shuffle, seed {}), compute "
                  "{} ms per step",
                  opts.batch, opts.steps,
                  static_cast<double>(opts.steps) / static_cast<double>(d.per_epoch), d.per_epoch,
                  opts.seed, opts.compute_ms));
  report.describe("loader", fmt::format("prefetch {}, {} threads, each with its own reader",
                                        opts.prefetch, opts.threads));
  if (d.origin_modes) {
    report.describe("origin files",
                    d.cold ? "read cold: dropped from the page cache before each origin mode"
                           : "read warm: page cache kept (--warm)");
  }
  report.describe(
      "latencies",
      "the trainer's wait for each step's batch; over_*: fraction of steps waiting longer");
  const bool with_store = !runs.empty() && runs.front().mode == "store";
  for (const auto& run : runs) {
    if (!run.unavailable.empty()) {
      report.describe(run.mode, "n/a: " + run.unavailable);
      continue;
    }
    auto cell = cell_of(run, d.per_epoch);
    if (with_store && run.mode != "store")
      compare_with_store(report, cell, run, runs.front().result);
    report.add(std::move(cell));
  }
  return report;
}

/// The store's dataset, or without a store the index alone.
struct Sources {
  std::optional<Client> client;
  std::optional<Dataset> dataset;
  std::optional<Index> own_index;
  const Index& index() const { return dataset ? dataset->index() : *own_index; }
};

Sources open_sources(const BenchLoaderOptions& opts, const Settings& settings) {
  Sources s;
  if (!opts.store.empty()) {
    s.client.emplace(opts.store, settings);
    s.dataset.emplace(s.client->open(opts.dataset));
  } else {
    s.own_index.emplace(Index::open(opts.index));
  }
  return s;
}

std::string hdf5_unavailable(const Index& index) {
#if DDSTAGE_HAVE_HDF5
  return index.manifest().format == "hdf5" ? "" : "not an HDF5 source";
#else
  (void)index;
  return "built without HDF5";
#endif
}

}  // namespace

void run_bench_loader(const BenchLoaderOptions& opts, const CliContext& ctx) {
  check_sources(opts);
  opts.outputs.check();
  const auto compare = checked_compare(opts);
  const auto settings = ctx.resolve_settings();
  const bool allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale");
  const auto sources = open_sources(opts, settings);
  const Index& index = sources.index();
  const auto fields = field_ids(index, opts.fields);
  const auto ids = shuffled_batches(index.samples(), opts.batch, opts.steps, opts.seed);
  if (!compare.empty() && !allow_stale) index.check_all_fresh();
  const TrainingLoopOptions loop{
      .batch = opts.batch,
      .steps = opts.steps,
      .compute = std::chrono::nanoseconds(static_cast<int64_t>(opts.compute_ms * 1e6)),
      .prefetch = opts.prefetch,
      .threads = opts.threads};
  const auto check = checksum_check(index, fields);
  std::vector<ModeRun> runs;
  if (sources.dataset) {
    const Dataset& dataset = *sources.dataset;
    runs.push_back(run_mode(
        "store", loop, ids, [&] { return std::make_unique<StoreBatches>(dataset, fields); }, check,
        settings));
  }
  const auto origin_files = index_files(index, {FileKind::source, FileKind::pack});
  [[maybe_unused]] std::mutex hdf5_library;
  for (const auto& mode : compare) {
    if (auto why = mode == "hdf5" ? hdf5_unavailable(index) : ""; !why.empty()) {
      runs.push_back({mode, std::move(why), {}});
      continue;
    }
    if (!opts.warm) drop_cached_pages(origin_files);
    BatchSourceFactory factory = [&]() -> std::unique_ptr<BatchSource> {
      return std::make_unique<OriginBatches>(index, fields, allow_stale);
    };
#if DDSTAGE_HAVE_HDF5
    if (mode == "hdf5")
      factory = [&] { return std::make_unique<Hdf5Batches>(index, fields, hdf5_library); };
#endif
    runs.push_back(run_mode(mode, loop, ids, factory, check, settings));
  }
  RunDescription desc{.dataset = sources.dataset ? opts.dataset : index.dir().string(),
                      .samples = index.samples(),
                      .per_epoch = index.samples() / opts.batch,
                      .cold = !opts.warm,
                      .origin_modes = !compare.empty()};
  for (uint32_t f : fields) desc.fields.push_back(index.fields()[f].name);
  const auto report = loader_report(opts, desc, runs);
  report.print();
  for (const auto& run : runs) {
    if (run.result.mismatches) {
      spdlog::error("{}: {} rows returned bytes that do not match the index", run.mode,
                    run.result.mismatches);
    }
  }
  report.write(opts.outputs);
}

void setup_bench_loader(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchLoaderOptions>();
  auto* sub = bench.add_subcommand(
      "loader", "A training loop's DataLoader wait per step: store vs origin, same ids");
  sub->add_option("--store", opts->store,
                  "The store directory (default with --dataset: DDSTAGE_STORE)");
  sub->add_option("--dataset", opts->dataset, "The loaded dataset");
  sub->add_option("--index", opts->index,
                  "DATASET.ddx: without a store, run the origin modes only");
  sub->add_option("--field", opts->fields,
                  "Fields to read per step, comma-separated (default: all)")
      ->delimiter(',');
  sub->add_option("--compare", opts->compare,
                  "Origin modes to run too: origin (index + pread), hdf5 (HDF5 API)")
      ->delimiter(',');
  sub->add_option("--batch", opts->batch, "Samples per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--compute-ms", opts->compute_ms, "Simulated compute per step, milliseconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--steps", opts->steps, "Training steps per mode")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--prefetch", opts->prefetch, "Batches read ahead of the trainer")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  sub->add_option("--threads", opts->threads, "Loader threads, each with its own reader")
      ->capture_default_str()
      ->check(CLI::Range(1u, 256u));
  sub->add_option("--seed", opts->seed, "Seed of the per-epoch shuffle")->capture_default_str();
  sub->add_flag("--warm", opts->warm,
                "Keep origin files in the page cache (default: drop them before each origin mode)");
  sub->add_flag("--allow-stale", opts->allow_stale, "Read sources that changed after flattening");
  add_bench_output_options(*sub, opts->outputs);
  sub->callback([opts, &ctx] {
    opts->store = store_for_dataset(opts->store, opts->dataset, ctx);
    run_bench_loader(*opts, ctx);
  });
}

}  // namespace ddstage::cli
