#include <chrono>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench_cmd.hpp"
#include "ddstage/checksum.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/origin_reader.hpp"
#include "json_writer.hpp"
#include "latency_stats.hpp"
#if DDSTAGE_HAVE_HDF5
#include "ddstage/formats/hdf5_sample_reader.hpp"
#endif

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ModeResult {
  std::string mode;
  std::vector<double> us;  // per sample, all fields
  LatencyStats stats;
  uint64_t bytes = 0;
  double seconds = 0;
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
ModeResult time_mode(std::string mode, const Index& index, const std::vector<uint64_t>& ids, ReadFn&& read_sample) {
  ModeResult r{std::move(mode)};
  r.us.reserve(ids.size());
  std::vector<std::byte> buffer;
  const auto fields = static_cast<uint32_t>(index.fields().size());
  for (uint64_t id : ids) {
    uint64_t bytes = 0;
    for (uint32_t f = 0; f < fields; ++f) bytes += index.entry(id, f).length;
    buffer.resize(bytes);
    const auto t0 = Clock::now();
    read_sample(id, std::span(buffer));
    r.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    uint64_t at = 0;
    for (uint32_t f = 0; f < fields; ++f) {
      const auto& e = index.entry(id, f);
      r.mismatches += checksum(std::span(buffer).subspan(at, e.length)) != e.checksum;
      at += e.length;
    }
    r.bytes += bytes;
  }
  r.seconds = std::accumulate(r.us.begin(), r.us.end(), 0.0) / 1e6;
  r.stats = summarize(r.us);
  return r;
}

void print_table(const std::vector<ModeResult>& results, uint64_t n) {
  fmt::print("{:<14} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "mode", "samples", "mean_us", "p50_us",
             "p99_us", "p99.9_us", "max_us", "MB/s");
  for (const auto& r : results) {
    fmt::print("{:<14} {:>8} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.1f} {:>10.1f}\n", r.mode, n,
               r.stats.mean, r.stats.p50, r.stats.p99, r.stats.p999, r.stats.max,
               static_cast<double>(r.bytes) / r.seconds / 1e6);
  }
  if (results.size() == 2) {
    fmt::print("ratio: {} is {:.1f}x the cost of {} per sample (mean), {:.1f}x at p50\n", results[1].mode,
               results[1].stats.mean / results[0].stats.mean, results[0].mode,
               results[1].stats.p50 / results[0].stats.p50);
  }
}

void write_json(const std::string& path, const Index& index, const std::vector<ModeResult>& results, uint64_t n) {
  JsonWriter j;
  j.begin_object().field("bench", "origin").field("dataset", index.dir().string());
  j.field("format", index.manifest().format).field("samples", n).field("fields", index.fields().size());
  j.key("modes").begin_array();
  for (const auto& r : results) {
    j.begin_object().field("mode", r.mode).field("bytes", r.bytes).field("seconds", r.seconds);
    j.field("mean_us", r.stats.mean).field("p50_us", r.stats.p50).field("p99_us", r.stats.p99);
    j.field("p999_us", r.stats.p999).field("max_us", r.stats.max).field("mismatches", r.mismatches).end_object();
  }
  j.end_array();
  if (results.size() == 2) j.field("ratio_mean", results[1].stats.mean / results[0].stats.mean);
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
