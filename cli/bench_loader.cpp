#include "bench_loader.hpp"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/checksum.hpp"
#include "ddstage/client.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/origin_reader.hpp"
#include "json_writer.hpp"
#include "page_cache.hpp"
#include "progress_line.hpp"
#include "training_loop.hpp"
#if DDSTAGE_HAVE_HDF5
#include "ddstage/formats/hdf5_sample_reader.hpp"
#endif

namespace ddstage::cli {
namespace {

/// Bytes of a batch laid out field after field, each field's rows in the order of ids.
uint64_t batch_bytes(const Index& index, std::span<const uint32_t> fields, std::span<const uint64_t> ids) {
  uint64_t bytes = 0;
  for (uint32_t f : fields) {
    for (uint64_t id : ids) bytes += index.entry(id, f).length;
  }
  return bytes;
}

/// get_batch from a running store, one call per field.
class StoreBatches final : public BatchSource {
 public:
  StoreBatches(const Dataset& dataset, std::span<const uint32_t> fields) : m_reader(dataset.reader()) {
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
      : m_index(index), m_fields(fields), m_reader(index, {.verify = false, .allow_stale = allow_stale}) {}
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
  return [&index, fields](std::span<const uint64_t> ids, std::span<const std::byte> batch) {
    uint64_t bad = 0;
    uint64_t at = 0;
    for (uint32_t f : fields) {
      for (uint64_t id : ids) {
        const Entry& e = index.entry(id, f);
        bad += at + e.length > batch.size() || checksum(batch.subspan(at, e.length)) != e.checksum;
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
    if (m != "origin" && m != "hdf5") throw UsageError(fmt::format("unknown --compare mode '{}' (origin, hdf5)", m));
    if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
  }
  return modes;
}

void check_sources(const BenchLoaderOptions& opts) {
  if (opts.store.empty() && opts.index.empty()) {
    throw UsageError("give --store DIR --dataset NAME, or --index DATASET.ddx for origin modes only");
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
                 const BatchSourceFactory& sources, const BatchCheck& check, const Settings& settings) {
  ProgressLine line(fmt::format("loader {}", mode), settings);
  double shown = -1;
  auto progress = [&](uint64_t done, uint64_t bytes, double seconds) {
    if (seconds - shown < 0.2 && done < loop.steps) return;
    shown = seconds;
    line({.items_done = done, .total_items = loop.steps, .bytes_done = bytes, .seconds = seconds,
          .final = done == loop.steps});
  };
  return {std::move(mode), "", run_training_loop(loop, ids, sources, check, progress)};
}

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double fraction(uint64_t n, uint64_t of) { return of ? static_cast<double>(n) / static_cast<double>(of) : 0; }

struct RunDescription {
  std::string dataset;
  uint64_t samples = 0;
  std::vector<std::string> fields;
  uint64_t per_epoch = 0;  // steps in one epoch
  bool cold = true;
  bool origin_modes = false;
};

double epoch_seconds(const TrainingLoopResult& r, uint64_t per_epoch) {
  return r.seconds / static_cast<double>(r.steps) * static_cast<double>(per_epoch);
}

void print_table(const BenchLoaderOptions& opts, const RunDescription& d, const std::vector<ModeRun>& runs) {
  fmt::print("loader: dataset {} ({} samples, fields {}), batch {}, {} steps ({:.2f} epochs of {} steps), "
             "compute {} ms/step, prefetch {}, {} threads, seed {}\n",
             d.dataset, d.samples, fmt::join(d.fields, ","), opts.batch, opts.steps,
             static_cast<double>(opts.steps) / static_cast<double>(d.per_epoch), d.per_epoch, opts.compute_ms,
             opts.prefetch, opts.threads, opts.seed);
  if (d.origin_modes) {
    fmt::print("origin files read {}\n", d.cold ? "cold: dropped from the page cache before each origin mode"
                                                 : "warm: page cache kept (--warm)");
  }
  fmt::print("{:<8} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}\n", "mode", "steps",
             "samples/s", "total_s", "epoch_s", "wait_ms", "p50_ms", "p99_ms", "p99.9_ms", "max_ms", ">100ms",
             ">1s");
  for (const auto& run : runs) {
    if (!run.unavailable.empty()) {
      fmt::print("{:<8} n/a: {}\n", run.mode, run.unavailable);
      continue;
    }
    const auto& r = run.result;
    fmt::print("{:<8} {:>6} {:>10.1f} {:>9.2f} {:>9.2f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>6.1f}% {:>6.1f}%\n",
               run.mode, r.steps, static_cast<double>(r.samples) / r.seconds, r.seconds,
               epoch_seconds(r, d.per_epoch), r.wait_ns.mean() / 1e6, ms(r.wait_ns.percentile(0.5)),
               ms(r.wait_ns.percentile(0.99)), ms(r.wait_ns.percentile(0.999)), ms(r.wait_ns.max()),
               100 * fraction(r.waits_over_short, r.steps), 100 * fraction(r.waits_over_long, r.steps));
  }
}

/// Each origin mode against the store: how much longer an epoch takes and how much worse the
/// wait tail is.
struct Ratio {
  std::string mode;
  double epoch = 0, wait_mean = 0, wait_p99 = 0;
};

std::vector<Ratio> ratios_vs_store(const std::vector<ModeRun>& runs) {
  std::vector<Ratio> ratios;
  if (runs.empty() || runs.front().mode != "store") return ratios;
  const auto& store = runs.front().result;
  auto over = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  for (const auto& run : runs) {
    if (run.mode == "store" || !run.unavailable.empty()) continue;
    const auto& r = run.result;
    ratios.push_back({run.mode, over(r.seconds, store.seconds), over(r.wait_ns.mean(), store.wait_ns.mean()),
                      over(static_cast<double>(r.wait_ns.percentile(0.99)),
                           static_cast<double>(store.wait_ns.percentile(0.99)))});
  }
  return ratios;
}

void print_ratios(const std::vector<ModeRun>& runs, const std::vector<Ratio>& ratios) {
  for (const auto& q : ratios) {
    const auto& r = std::find_if(runs.begin(), runs.end(), [&](const ModeRun& m) { return m.mode == q.mode; })->result;
    fmt::print("{} vs store: epoch {:.2f}x as long, wait mean {:.1f}x, wait p99 {:.1f}x; steps waiting > 1 s: "
               "{:.1f}% vs {:.1f}%\n",
               q.mode, q.epoch, q.wait_mean, q.wait_p99, 100 * fraction(r.waits_over_long, r.steps),
               100 * fraction(runs.front().result.waits_over_long, runs.front().result.steps));
  }
}

void write_json(const BenchLoaderOptions& opts, const RunDescription& d, const std::vector<ModeRun>& runs,
                const std::vector<Ratio>& ratios) {
  JsonWriter j;
  j.begin_object().field("bench", "loader").field("dataset", d.dataset).field("samples", d.samples);
  j.key("fields").begin_array();
  for (const auto& f : d.fields) j.value(f);
  j.end_array().field("batch", opts.batch).field("steps", opts.steps).field("steps_per_epoch", d.per_epoch);
  j.field("compute_ms", opts.compute_ms).field("prefetch", opts.prefetch).field("threads", opts.threads);
  j.field("seed", opts.seed).field("origin_cold", d.cold).key("modes").begin_array();
  for (const auto& run : runs) {
    j.begin_object().field("mode", run.mode).field("available", run.unavailable.empty());
    if (!run.unavailable.empty()) {
      j.field("reason", run.unavailable).end_object();
      continue;
    }
    const auto& r = run.result;
    j.field("steps", r.steps).field("samples", r.samples).field("bytes", r.bytes).field("seconds", r.seconds);
    j.field("epoch_seconds", epoch_seconds(r, d.per_epoch));
    j.field("samples_per_s", static_cast<double>(r.samples) / r.seconds).field("wait_seconds", r.wait_seconds);
    j.field("wait_mean_ms", r.wait_ns.mean() / 1e6).field("wait_p50_ms", ms(r.wait_ns.percentile(0.5)));
    j.field("wait_p99_ms", ms(r.wait_ns.percentile(0.99))).field("wait_p999_ms", ms(r.wait_ns.percentile(0.999)));
    j.field("wait_max_ms", ms(r.wait_ns.max())).field("wait_min_ms", ms(r.wait_ns.min()));
    j.field("waits_over_100ms", fraction(r.waits_over_short, r.steps));
    j.field("waits_over_1s", fraction(r.waits_over_long, r.steps)).field("mismatches", r.mismatches).end_object();
  }
  j.end_array().key("ratios_vs_store").begin_array();
  for (const auto& q : ratios) {
    j.begin_object().field("mode", q.mode).field("epoch", q.epoch).field("wait_mean", q.wait_mean);
    j.field("wait_p99", q.wait_p99).end_object();
  }
  j.end_array().end_object();
  write_text_file(opts.json, j.str());
}

/// What runs in each mode, in the same order and on the same ids.
struct Sources {
  std::optional<Client> client;
  std::optional<Dataset> dataset;
  std::optional<Index> own_index;  // without a store
  const Index* index = nullptr;
};

Sources open_sources(const BenchLoaderOptions& opts, const Settings& settings) {
  Sources s;
  if (!opts.store.empty()) {
    s.client.emplace(opts.store, settings);
    s.dataset.emplace(s.client->open(opts.dataset));
    s.index = &s.dataset->index();
  } else {
    s.own_index.emplace(Index::open(opts.index));
    s.index = &*s.own_index;
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
  const auto compare = checked_compare(opts);
  const auto settings = ctx.resolve_settings();
  const bool allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale");
  auto sources = open_sources(opts, settings);
  const Index& index = *sources.index;
  const auto fields = field_ids(index, opts.fields);
  const auto ids = shuffled_batches(index.samples(), opts.batch, opts.steps, opts.seed);
  if (!compare.empty() && !allow_stale) index.check_all_fresh();
  const TrainingLoopOptions loop{.batch = opts.batch, .steps = opts.steps,
                                 .compute = std::chrono::nanoseconds(static_cast<int64_t>(opts.compute_ms * 1e6)),
                                 .prefetch = opts.prefetch, .threads = opts.threads};
  const auto check = checksum_check(index, fields);
  std::vector<ModeRun> runs;
  if (sources.dataset) {
    const Dataset& dataset = *sources.dataset;
    runs.push_back(run_mode("store", loop, ids, [&] { return std::make_unique<StoreBatches>(dataset, fields); },
                            check, settings));
  }
  const auto origin_files = index_files(index, {FileKind::source, FileKind::pack});
  [[maybe_unused]] std::mutex hdf5_library;
  for (const auto& mode : compare) {
    if (mode == "hdf5" && !hdf5_unavailable(index).empty()) {
      runs.push_back({mode, hdf5_unavailable(index), {}});
      continue;
    }
    if (!opts.warm) drop_cached_pages(origin_files);
    BatchSourceFactory factory = [&]() -> std::unique_ptr<BatchSource> {
      return std::make_unique<OriginBatches>(index, fields, allow_stale);
    };
#if DDSTAGE_HAVE_HDF5
    if (mode == "hdf5") factory = [&] { return std::make_unique<Hdf5Batches>(index, fields, hdf5_library); };
#endif
    runs.push_back(run_mode(mode, loop, ids, factory, check, settings));
  }
  RunDescription desc{.dataset = sources.dataset ? opts.dataset : index.dir().string(),
                      .samples = index.samples(),
                      .per_epoch = index.samples() / opts.batch,
                      .cold = !opts.warm,
                      .origin_modes = !compare.empty()};
  for (uint32_t f : fields) desc.fields.push_back(index.fields()[f].name);
  const auto ratios = ratios_vs_store(runs);
  print_table(opts, desc, runs);
  print_ratios(runs, ratios);
  for (const auto& run : runs) {
    if (run.result.mismatches) {
      spdlog::error("{}: {} rows returned bytes that do not match the index", run.mode, run.result.mismatches);
    }
  }
  if (!opts.json.empty()) write_json(opts, desc, runs, ratios);
}

void setup_bench_loader(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchLoaderOptions>();
  auto* sub = bench.add_subcommand("loader", "A training loop's DataLoader wait per step: store vs origin, same ids");
  sub->add_option("--store", opts->store, "The store directory (holds store.yaml)");
  sub->add_option("--dataset", opts->dataset, "The loaded dataset");
  sub->add_option("--index", opts->index, "DATASET.ddx: without a store, run the origin modes only");
  sub->add_option("--field", opts->fields, "Fields to read per step, comma-separated (default: all)")
      ->delimiter(',');
  sub->add_option("--compare", opts->compare, "Origin modes to run too: origin (index + pread), hdf5 (HDF5 API)")
      ->delimiter(',');
  sub->add_option("--batch", opts->batch, "Samples per step")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--compute-ms", opts->compute_ms, "Simulated compute per step, milliseconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--steps", opts->steps, "Training steps per mode")->capture_default_str()->check(CLI::PositiveNumber);
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
  sub->add_option("--json", opts->json, "Also write every figure as JSON to this file");
  sub->callback([opts, &ctx] { run_bench_loader(*opts, ctx); });
}

}  // namespace ddstage::cli
