#include <chrono>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench_cmd.hpp"
#include "ddstage/checksum.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/latency_histogram.hpp"
#include "ddstage/origin_reader.hpp"
#include "json_writer.hpp"
#if DDSTAGE_HAVE_HDF5
#include "ddstage/formats/hdf5_sample_reader.hpp"
#endif

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ModeResult {
  std::string mode;
  LatencyHistogram ns;  // per sample, all fields
  uint64_t bytes = 0;
  uint64_t mismatches = 0;
  double seconds() const { return static_cast<double>(ns.sum()) / 1e9; }
  double mean_us() const { return ns.mean() / 1e3; }
  double us(double p) const { return static_cast<double>(ns.percentile(p)) / 1e3; }
  double max_us() const { return static_cast<double>(ns.max()) / 1e3; }
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
ModeResult time_mode(std::string mode, const Index& index, const std::vector<uint64_t>& ids, ReadFn&& read_sample) {
  ModeResult r{std::move(mode)};
  std::vector<std::byte> buffer;
  const auto fields = static_cast<uint32_t>(index.fields().size());
  for (uint64_t id : ids) {
    uint64_t bytes = 0;
    for (uint32_t f = 0; f < fields; ++f) bytes += index.entry(id, f).length;
    buffer.resize(bytes);
    const auto t0 = Clock::now();
    read_sample(id, std::span(buffer));
    r.ns.record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    uint64_t at = 0;
    for (uint32_t f = 0; f < fields; ++f) {
      const auto& e = index.entry(id, f);
      r.mismatches += checksum(std::span(buffer).subspan(at, e.length)) != e.checksum;
      at += e.length;
    }
    r.bytes += bytes;
  }
  return r;
}

void print_table(const std::vector<ModeResult>& results, uint64_t n) {
  fmt::print("{:<14} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "mode", "samples", "mean_us", "p50_us",
             "p99_us", "p99.9_us", "max_us", "MB/s");
  for (const auto& r : results) {
    fmt::print("{:<14} {:>8} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.1f} {:>10.1f}\n", r.mode, n,
               r.mean_us(), r.us(0.5), r.us(0.99), r.us(0.999), r.max_us(),
               static_cast<double>(r.bytes) / r.seconds() / 1e6);
  }
  if (results.size() == 2) {
    fmt::print("ratio: {} is {:.1f}x the cost of {} per sample (mean), {:.1f}x at p50\n", results[1].mode,
               results[1].mean_us() / results[0].mean_us(), results[0].mode, results[1].us(0.5) / results[0].us(0.5));
  }
}

void write_json(const std::string& path, const Index& index, const std::vector<ModeResult>& results, uint64_t n) {
  JsonWriter j;
  j.begin_object().field("bench", "origin").field("dataset", index.dir().string());
  j.field("format", index.manifest().format).field("samples", n).field("fields", index.fields().size());
  j.key("modes").begin_array();
  for (const auto& r : results) {
    j.begin_object().field("mode", r.mode).field("bytes", r.bytes).field("seconds", r.seconds());
    j.field("mean_us", r.mean_us()).field("p50_us", r.us(0.5)).field("p99_us", r.us(0.99));
    j.field("p999_us", r.us(0.999)).field("max_us", r.max_us()).field("mismatches", r.mismatches).end_object();
  }
  j.end_array();
  if (results.size() == 2) j.field("ratio_mean", results[1].mean_us() / results[0].mean_us());
  j.end_object();
  write_text_file(path, j.str());
}

}  // namespace

void run_bench_origin(const BenchOriginOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  auto index = Index::open(opts.dataset);
  const bool allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale");
  if (!allow_stale) index.check_all_fresh();
  if (opts.samples == 0) throw UsageError("--samples must be > 0");
  const auto ids = random_ids(opts.samples, index.samples(), opts.seed);

  OriginReader reader(index, {.verify = false, .allow_stale = allow_stale});
  auto pread_sample = [&reader](uint64_t id, std::span<std::byte> out) { reader.read_sample(id, out); };
  // The VM drops idle file pages: warm the same samples first so both modes read page cache.
  time_mode("warm-up", index, ids, pread_sample);

  std::vector<ModeResult> results;
  results.push_back(time_mode("index+pread", index, ids, pread_sample));
#if DDSTAGE_HAVE_HDF5
  if (index.manifest().format == "hdf5") {
    formats::Hdf5SampleReader h5(index);
    const auto fields = static_cast<uint32_t>(index.fields().size());
    results.push_back(time_mode("hdf5-api", index, ids, [&h5, fields](uint64_t id, std::span<std::byte> out) {
      for (uint32_t f = 0; f < fields; ++f) out = out.subspan(h5.read(id, f, out));
    }));
  }
#endif
  if (results.size() == 1) spdlog::info("no HDF5 baseline: the dataset's format is {}", index.manifest().format);
  print_table(results, ids.size());
  for (const auto& r : results) {
    if (r.mismatches) spdlog::error("{}: {} samples returned bytes that do not match the index", r.mode, r.mismatches);
  }
  if (!opts.json.empty()) write_json(opts.json, index, results, ids.size());
}

}  // namespace ddstage::cli
