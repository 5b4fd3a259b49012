#include "bench/bench_loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
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
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/store_control.hpp"
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
  double staging = 0;  ///< seconds its load took before the loop started (full, lazy)
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

bool is_staged(std::string_view mode) {
  return mode == "full" || mode == "lazy";
}

/// The modes besides the store's, in the order asked, each once.
std::vector<std::string> checked_compare(const BenchLoaderOptions& opts) {
  std::vector<std::string> modes;
  auto wanted = opts.compare;
  if (wanted.empty() && opts.store.empty()) wanted = {"origin", "hdf5"};
  if (wanted.empty() && opts.dataset.empty()) wanted = {"full", "lazy"};
  for (const auto& m : wanted) {
    if (m != "origin" && m != "hdf5" && !is_staged(m))
      throw UsageError(fmt::format("unknown --compare mode '{}' (origin, hdf5, full, lazy)", m));
    if (is_staged(m) && opts.store.empty())
      throw UsageError(fmt::format("--compare {} loads into a store: give --store DIR", m));
    if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
  }
  return modes;
}

void check_sources(const BenchLoaderOptions& opts) {
  if (opts.store.empty() && opts.index.empty()) {
    throw UsageError(
        "give --store DIR --dataset NAME, or --index DATASET.ddx for origin modes only");
  }
  if (!opts.store.empty() && opts.dataset.empty() && opts.index.empty()) {
    throw UsageError(
        "--store needs --dataset NAME, or --index DATASET.ddx to load (--compare full,lazy)");
  }
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
TrainingLoopResult run_loop(const std::string& mode, const TrainingLoopOptions& loop,
                            std::span<const uint64_t> ids, const BatchSourceFactory& sources,
                            const BatchCheck& check, const Settings& settings) {
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
  return run_training_loop(loop, ids, sources, check, progress);
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

std::string epoch_label(const EpochResult& e) {
  return e.first_epoch == e.last_epoch ? std::to_string(e.first_epoch)
                                       : fmt::format("{}-{}", e.first_epoch, e.last_epoch);
}

/// What a trainer sees of an epoch: the loop's figures, and for the first epoch the load that
/// ran before it (a full load delays the first step by all of it).
struct EpochFigures {
  const EpochResult& e;
  double staging = 0;  ///< seconds before the loop; only in the first epoch
  uint64_t per_epoch = 0;

  double first_step() const { return staging + e.first_wait; }
  /// Seconds per whole epoch: a partial last epoch scaled up, epochs reported together averaged.
  double epoch() const {
    return staging + e.seconds / static_cast<double>(e.steps) * static_cast<double>(per_epoch);
  }
  double over_1s() const { return fraction(e.waits_over_long, e.steps); }
};

EpochFigures figures_of(const ModeRun& run, const EpochResult& e, uint64_t per_epoch) {
  return {e, e.first_epoch == 1 ? run.staging : 0, per_epoch};
}

/// A mode's cell for an epoch: rows are samples, latencies the trainer's wait per step.
BenchCell cell_of(const ModeRun& run, const EpochResult& e, uint64_t per_epoch) {
  const auto f = figures_of(run, e, per_epoch);
  BenchCell c{.dims = {{"mode", run.mode}, {"epoch", epoch_label(e)}},
              .rows = e.samples,
              .bytes = e.bytes,
              .seconds = f.staging + e.seconds};
  c.ns_per_row = e.wait_ns;
  c.extras = {{"first_step_s", f.first_step()},
              {"epoch_s", f.epoch()},
              {"samples_per_s", static_cast<double>(e.samples) / c.seconds},
              {"over_100ms", fraction(e.waits_over_short, e.steps)},
              {"over_1s", f.over_1s()},
              {"mismatches", static_cast<double>(e.mismatches)}};
  if (is_staged(run.mode)) c.extras.emplace_back("staging_s", f.staging);
  return c;
}

double over(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

/// The same epochs of the baseline, or nullptr when it did not reach them.
const EpochResult* same_epochs(const ModeRun& base, const EpochResult& e) {
  for (const auto& b : base.result.epochs) {
    if (b.first_epoch == e.first_epoch) return &b;
  }
  return nullptr;
}

/// A mode's epoch against the baseline's same epoch: how much longer the epoch, how much worse
/// the wait tail, as extras of its cell and a note.
void compare_with_base(BenchReport& report, BenchCell& cell, const ModeRun& run,
                       const EpochResult& e, const ModeRun& base, uint64_t per_epoch) {
  const EpochResult* b = same_epochs(base, e);
  if (!b) return;
  const auto fe = figures_of(run, e, per_epoch);
  const auto fb = figures_of(base, *b, per_epoch);
  const double epoch = over(fe.epoch(), fb.epoch());
  const double p99 = over(static_cast<double>(e.wait_ns.percentile(0.99)),
                          static_cast<double>(b->wait_ns.percentile(0.99)));
  cell.extras.emplace_back(fmt::format("epoch_vs_{}", base.mode), epoch);
  cell.extras.emplace_back(fmt::format("p99_vs_{}", base.mode), p99);
  report.note(fmt::format(
      "{} vs {}, epoch {}: first step {:.2f} s vs {:.2f} s, epoch {:.2f}x as long, wait mean "
      "{:.1f}x, wait p99 {:.1f}x; steps waiting > 1 s: {:.1f}% vs {:.1f}%",
      run.mode, base.mode, epoch_label(e), fe.first_step(), fb.first_step(), epoch,
      over(e.wait_ns.mean(), b->wait_ns.mean()), p99, 100 * fe.over_1s(), 100 * fb.over_1s()));
}

const ModeRun* measured(const std::vector<ModeRun>& runs, std::string_view mode) {
  for (const auto& run : runs) {
    if (run.mode == mode && run.unavailable.empty()) return &run;
  }
  return nullptr;
}

/// Issue 17's acceptance line: from the second epoch a lazy load reads from the store alone, so
/// its wait per step must match a fully loaded store's within noise.
void note_lazy_acceptance(BenchReport& report, const std::vector<ModeRun>& runs) {
  const ModeRun* lazy = measured(runs, "lazy");
  const ModeRun* full = measured(runs, "full");
  if (!full) full = measured(runs, "store");
  if (!lazy || !full) return;
  const EpochResult* l = lazy->result.epochs.size() > 1 ? &lazy->result.epochs[1] : nullptr;
  const EpochResult* f = l ? same_epochs(*full, *l) : nullptr;
  if (!f) {
    report.note("lazy epoch 2 vs the full store: not measured, the run has one epoch (--steps)");
    return;
  }
  report.note(fmt::format(
      "lazy epoch {} vs the full store ({}): wait mean {:.2f}x, p99 {:.2f}x; steps waiting > 1 "
      "s: {:.1f}% vs {:.1f}% (issue 17: equal within noise)",
      epoch_label(*l), full->mode, over(l->wait_ns.mean(), f->wait_ns.mean()),
      over(static_cast<double>(l->wait_ns.percentile(0.99)),
           static_cast<double>(f->wait_ns.percentile(0.99))),
      100 * fraction(l->waits_over_long, l->steps), 100 * fraction(f->waits_over_long, f->steps)));
}

BenchReport loader_report(const BenchLoaderOptions& opts, const RunDescription& d,
                          const std::vector<ModeRun>& runs) {
  BenchReport report("loader", "step");
  // What decides between the modes (ddstage-bench(1)): the wait tail and the share of steps
  // that stall the trainer, then what that costs an epoch and its first step.
  report.set_panels(
      {{"wait per step, µs", {{"mean_us", "mean"}, {"p99_us", "p99"}}},
       {"steps waiting longer, %", {{"over_100ms", "> 100 ms"}, {"over_1s", "> 1 s"}}, 100, false},
       {"seconds", {{"first_step_s", "first step"}, {"epoch_s", "epoch"}}}});
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
                    d.cold ? "read cold: dropped from the page cache before each mode reading "
                             "them (origin, hdf5, full, lazy)"
                           : "read warm: page cache kept (--warm)");
  }
  report.describe(
      "latencies",
      "the trainer's wait for each step's batch; over_*: fraction of steps waiting longer; "
      "first_step_s and epoch_s of epoch 1 include the load before it (full, lazy: staging_s)");
  const ModeRun* base = measured(runs, "store");
  if (!base) base = measured(runs, "full");
  for (const auto& run : runs) {
    if (!run.unavailable.empty()) {
      report.describe(run.mode, "n/a: " + run.unavailable);
      continue;
    }
    for (const auto& e : run.result.epochs) {
      auto cell = cell_of(run, e, d.per_epoch);
      if (base && &run != base) compare_with_base(report, cell, run, e, *base, d.per_epoch);
      report.add(std::move(cell));
    }
  }
  note_lazy_acceptance(report, runs);
  return report;
}

/// The store (when given), the dataset it holds (when named), else the index alone.
struct Sources {
  std::optional<Client> client;
  std::optional<Dataset> dataset;
  std::optional<Index> own_index;
  const Index& index() const { return dataset ? dataset->index() : *own_index; }
};

Sources open_sources(const BenchLoaderOptions& opts, const Settings& settings) {
  Sources s;
  if (!opts.store.empty()) s.client.emplace(opts.store, settings);
  if (!opts.dataset.empty()) {
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

/// A dataset loaded for one staged mode, unloaded when the mode is done, however it ends.
class BenchDataset {
 public:
  BenchDataset(StoreControl& control, std::string name)
      : m_control(control), m_name(std::move(name)) {}
  BenchDataset(const BenchDataset&) = delete;
  BenchDataset& operator=(const BenchDataset&) = delete;
  ~BenchDataset() {
    try {
      m_control.unload(m_name);
    } catch (const std::exception& e) {
      spdlog::warn("could not unload the bench's dataset {}: {}", m_name, e.what());
    }
  }
  const std::string& name() const { return m_name; }

 private:
  StoreControl& m_control;
  std::string m_name;
};

/// Why a load asked to be lazy is not: a server without lazy loads ignores the request's key
/// and loads whole, which store.yaml shows as regions not marked lazy.
std::string not_lazy(const std::filesystem::path& store, const std::string& name) {
  const auto regions = StoreDescriptor::read(store).dataset(name).regions;
  if (std::any_of(regions.begin(), regions.end(), [](const auto& r) { return r.lazy; })) return {};
  return "the store loaded it whole: its server does not stage lazily (load --lazy)";
}

/// What every mode shares: the loop, its ids, the check, where the origin files are.
struct LoaderRun {
  const BenchLoaderOptions& opts;
  const Settings& settings;
  const Index& index;
  std::span<const uint32_t> fields;
  std::span<const uint64_t> ids;
  TrainingLoopOptions loop;
  BatchCheck check;
  std::vector<std::filesystem::path> origin_files;
  bool allow_stale = false;
};

ModeRun run_store(const LoaderRun& r, std::string mode, const Dataset& dataset,
                  double staging = 0) {
  auto result = run_loop(
      mode, r.loop, r.ids, [&] { return std::make_unique<StoreBatches>(dataset, r.fields); },
      r.check, r.settings);
  return {std::move(mode), "", staging, std::move(result)};
}

/// full: the index loaded whole, then the loop; lazy: a lazy load (back at once), then the
/// loop, its first epoch staged by first touch. Each under a name of its own, unloaded after.
ModeRun run_staged(const LoaderRun& r, const std::string& mode, const Client& client) {
  auto control = store_control(r.opts.store, r.settings);
  const bool lazy = mode == "lazy";
  if (!r.opts.warm) drop_cached_pages(r.origin_files);
  const auto t0 = std::chrono::steady_clock::now();
  const LoadRequest request{.index = r.index.dir(),
                            .name = fmt::format("ddstage-bench-loader-{}-{}", ::getpid(), mode),
                            .allow_stale = r.allow_stale,
                            .lazy = lazy};
  std::optional<BenchDataset> loaded;
  try {
    control.load(request);
    loaded.emplace(control, request.name);
  } catch (const Error& e) {
    // A server that refuses a lazy load (one that knows the key but not this case): the run
    // goes on without the mode, as without HDF5.
    if (!lazy) throw;
    return {mode, fmt::format("the store refused a lazy load: {}", e.what()), 0, {}};
  }
  const double staging =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (lazy) {
    if (auto why = not_lazy(r.opts.store, loaded->name()); !why.empty())
      return {mode, std::move(why), 0, {}};
  }
  const Dataset dataset = client.open(loaded->name());
  return run_store(r, mode, dataset, staging);
}

ModeRun run_origin(const LoaderRun& r, const std::string& mode, std::mutex& hdf5_library) {
  if (auto why = mode == "hdf5" ? hdf5_unavailable(r.index) : ""; !why.empty())
    return {mode, std::move(why), 0, {}};
  if (!r.opts.warm) drop_cached_pages(r.origin_files);
  BatchSourceFactory factory = [&]() -> std::unique_ptr<BatchSource> {
    return std::make_unique<OriginBatches>(r.index, r.fields, r.allow_stale);
  };
#if DDSTAGE_HAVE_HDF5
  if (mode == "hdf5")
    factory = [&] { return std::make_unique<Hdf5Batches>(r.index, r.fields, hdf5_library); };
#else
  (void)hdf5_library;
#endif
  return {mode, "", 0, run_loop(mode, r.loop, r.ids, factory, r.check, r.settings)};
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
  const uint64_t per_epoch = index.samples() / opts.batch;
  const LoaderRun run{
      .opts = opts,
      .settings = settings,
      .index = index,
      .fields = fields,
      .ids = ids,
      .loop = {.batch = opts.batch,
               .steps = opts.steps,
               .compute = std::chrono::nanoseconds(static_cast<int64_t>(opts.compute_ms * 1e6)),
               .prefetch = opts.prefetch,
               .threads = opts.threads,
               .per_epoch = per_epoch},
      .check = checksum_check(index, fields),
      .origin_files = index_files(index, {FileKind::source, FileKind::pack}),
      .allow_stale = allow_stale};
  std::vector<ModeRun> runs;
  if (sources.dataset) runs.push_back(run_store(run, "store", *sources.dataset));
  std::mutex hdf5_library;
  for (const auto& mode : compare) {
    runs.push_back(is_staged(mode) ? run_staged(run, mode, *sources.client)
                                   : run_origin(run, mode, hdf5_library));
  }
  RunDescription desc{.dataset = sources.dataset ? opts.dataset : index.dir().string(),
                      .samples = index.samples(),
                      .per_epoch = per_epoch,
                      .cold = !opts.warm,
                      .origin_modes = !compare.empty()};
  for (uint32_t f : fields) desc.fields.push_back(index.fields()[f].name);
  const auto report = loader_report(opts, desc, runs);
  report.print();
  for (const auto& r : runs) {
    uint64_t mismatches = 0;
    for (const auto& e : r.result.epochs) mismatches += e.mismatches;
    if (mismatches)
      spdlog::error("{}: {} rows returned bytes that do not match the index", r.mode, mismatches);
  }
  report.write(opts.outputs);
}

void setup_bench_loader(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchLoaderOptions>();
  auto* sub = bench.add_subcommand(
      "loader",
      "A training loop's DataLoader wait per step and epoch: store, loaded whole or lazily, vs "
      "origin, same ids");
  sub->add_option("--store", opts->store,
                  "The store directory (default with --dataset: DDSTAGE_STORE)");
  sub->add_option("--dataset", opts->dataset, "The loaded dataset");
  sub->add_option("--index", opts->index,
                  "DATASET.ddx: without a store, run the origin modes only; with --store and no "
                  "--dataset, the index that full and lazy load");
  sub->add_option("--field", opts->fields,
                  "Fields to read per step, comma-separated (default: all)")
      ->delimiter(',');
  sub->add_option("--compare", opts->compare,
                  "Modes to run too: origin (index + pread), hdf5 (HDF5 API), full (load, then "
                  "train), lazy (load --lazy, then train)")
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
