#include "bench/bench_origin.hpp"

#include <chrono>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/latency_histogram.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/origin_reader.hpp"
#if DDSTAGE_HAVE_HDF5
#include "ddstage/formats/hdf5_sample_reader.hpp"
#endif

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

/// One mode's per-sample times; the cell's seconds are their sum (reading only, no checks).
struct ModeResult {
  std::string mode;
  LatencyHistogram ns;  // per sample, all fields
  uint64_t bytes = 0;
  uint64_t mismatches = 0;
};

std::vector<uint64_t> random_ids(uint64_t n, uint64_t samples, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> pick(0, samples - 1);
  std::vector<uint64_t> ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

/// Times read_sample(id, dest) for every id, dest holding all of the sample's fields in field
/// order, and checks each field's bytes against the index checksum (untimed), so a fast wrong
/// answer cannot win.
template <typename ReadFn>
ModeResult time_mode(std::string mode, const Index& index, const std::vector<uint64_t>& ids,
                     ReadFn&& read_sample) {
  ModeResult r{std::move(mode)};
  // Freshness is the timed reader's business (or --allow-stale's): this one only compares.
  OriginReader checker(index, {.allow_stale = true});
  std::vector<std::byte> buffer;
  const auto fields = static_cast<uint32_t>(index.fields().size());
  for (uint64_t id : ids) {
    uint64_t bytes = 0;
    for (uint32_t f = 0; f < fields; ++f) bytes += index.entry(id, f).length;
    buffer.resize(bytes);
    const auto t0 = Clock::now();
    read_sample(id, std::span(buffer));
    r.ns.record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    uint64_t at = 0;
    for (uint32_t f = 0; f < fields; ++f) {
      const auto e = index.entry(id, f);
      r.mismatches += !checker.check_row(id, f, std::span(buffer).subspan(at, e.length));
      at += e.length;
    }
    r.bytes += bytes;
  }
  return r;
}

BenchCell cell_of(const ModeResult& r, uint64_t samples) {
  BenchCell c{.dims = {{"mode", r.mode}}, .rows = samples, .bytes = r.bytes};
  c.seconds = static_cast<double>(r.ns.sum()) / 1e9;
  c.ns_per_row = r.ns;
  c.extras = {{"mismatches", static_cast<double>(r.mismatches)}};
  return c;
}

}  // namespace

void run_bench_origin(const BenchOriginOptions& opts, const CliContext& ctx) {
  opts.outputs.check();
  auto settings = ctx.resolve_settings();
  auto index = Index::open(opts.dataset);
  const bool allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale");
  if (!allow_stale) index.check_all_fresh();
  const auto ids = random_ids(opts.samples, index.samples(), opts.seed);

  OriginReader reader(index, {.verify = false, .allow_stale = allow_stale});
  auto pread_sample = [&reader](uint64_t id, std::span<std::byte> out) {
    reader.read_sample(id, out);
  };
  // The VM drops idle file pages: warm the same samples first so both modes read page cache.
  time_mode("warm-up", index, ids, pread_sample);

  std::vector<ModeResult> results;
  results.push_back(time_mode("index+pread", index, ids, pread_sample));
#if DDSTAGE_HAVE_HDF5
  if (index.manifest().format == "hdf5") {
    formats::Hdf5SampleReader h5(index);
    const auto fields = static_cast<uint32_t>(index.fields().size());
    results.push_back(
        time_mode("hdf5-api", index, ids, [&h5, fields](uint64_t id, std::span<std::byte> out) {
          for (uint32_t f = 0; f < fields; ++f) out = out.subspan(h5.read(id, f, out));
        }));
  }
#endif
  BenchReport report("origin", "sample");
  report.describe("dataset",
                  fmt::format("{} ({} samples, {} fields, format {})", index.dir().string(),
                              index.samples(), index.fields().size(), index.manifest().format));
  report.describe("samples", fmt::format("{} random ones, seed {}, every field of each", ids.size(),
                                         opts.seed));
  report.describe("page cache", "warm: the samples are read once before timing");
  if (results.size() == 1)
    report.describe("hdf5-api", "n/a: not an HDF5 source (" + index.manifest().format + ")");
  for (const auto& r : results) report.add(cell_of(r, ids.size()));
  if (results.size() == 2) {
    const auto& pread = results[0].ns;
    const auto& h5 = results[1].ns;
    report.note(fmt::format(
        "ratio: hdf5-api is {:.1f}x the cost of index+pread per sample (mean), {:.1f}x at p50",
        h5.mean() / pread.mean(),
        static_cast<double>(h5.percentile(0.5)) / static_cast<double>(pread.percentile(0.5))));
  }
  report.print();
  for (const auto& r : results) {
    if (r.mismatches)
      spdlog::error("{}: {} samples returned bytes that do not match the index", r.mode,
                    r.mismatches);
  }
  report.write(opts.outputs);
}

void setup_bench_origin(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchOriginOptions>();
  auto* sub = bench.add_subcommand("origin",
                                   "Per-sample reads: index + pread vs the HDF5 API, same samples");
  sub->add_option("dataset", opts->dataset, "The index directory (DATASET.ddx)")->required();
  sub->add_option("--samples", opts->samples, "Random samples to read")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", opts->seed, "Seed for the random sample choice")->capture_default_str();
  add_bench_output_options(*sub, opts->outputs);
  sub->add_flag("--allow-stale", opts->allow_stale, "Read sources that changed after flattening");
  sub->callback([opts, &ctx] { run_bench_origin(*opts, ctx); });
}

}  // namespace ddstage::cli
