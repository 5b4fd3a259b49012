// `ddstage bench store`: get_batch from a running store, per row and batched, against a memcpy
// floor measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "bench_cmd.hpp"
#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "json_writer.hpp"
#include "latency_stats.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

/// Bytes of the floor's source buffer: large enough that rows come from memory, not cache.
constexpr uint64_t floor_buffer_cap = 1ull << 30;

struct StoreResult {
  std::string mode;
  uint64_t batch = 0;
  std::vector<double> us_per_row;  // one value per call, divided by its rows
  LatencyStats stats;
  uint64_t bytes = 0;
  double seconds = 0;
};

/// Times fn(first, count) over ids in calls of `batch` rows.
template <typename Fn>
StoreResult time_calls(std::string mode, uint64_t batch, std::span<const uint64_t> ids, Fn&& fn) {
  StoreResult r{std::move(mode), batch};
  for (std::size_t first = 0; first < ids.size(); first += batch) {
    const std::size_t count = std::min<std::size_t>(batch, ids.size() - first);
    const auto t0 = Clock::now();
    r.bytes += fn(first, count);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    r.seconds += us / 1e6;
    r.us_per_row.push_back(us / static_cast<double>(count));
  }
  r.stats = summarize(r.us_per_row);
  return r;
}

void print(const std::vector<StoreResult>& results) {
  fmt::print("{:<16} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "mode", "batch", "mean_us/row", "p50", "p99",
             "max", "GB/s");
  for (const auto& r : results) {
    fmt::print("{:<16} {:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.1f} {:>10.2f}\n", r.mode, r.batch, r.stats.mean,
               r.stats.p50, r.stats.p99, r.stats.max, static_cast<double>(r.bytes) / r.seconds / 1e9);
  }
}

}  // namespace

void run_bench_store(const BenchStoreOptions& opts, const CliContext& ctx) {
  auto dataset = Client(opts.store, ctx.resolve_settings()).open(opts.dataset);
  const auto& index = dataset.index();
  const uint32_t field = opts.field.empty() ? index.default_field() : index.field_id(opts.field);
  const auto& name = index.fields()[field].name;
  std::mt19937_64 rng(opts.seed);
  std::vector<uint64_t> ids(opts.samples);
  for (auto& id : ids) id = std::uniform_int_distribution<uint64_t>(0, index.samples() - 1)(rng);
  uint64_t max_batch_bytes = 0;
  auto reader = dataset.reader();
  std::vector<std::byte> dest;
  auto batch_of = [&](std::size_t first, std::size_t count) {
    auto batch = std::span<const uint64_t>(ids).subspan(first, count);
    const uint64_t bytes = reader.batch_bytes(name, batch);
    if (dest.size() < bytes) dest.resize(bytes);
    reader.get_batch(name, batch, std::span(dest).first(bytes));
    max_batch_bytes = std::max(max_batch_bytes, bytes);
    return bytes;
  };
  // The floor: the same row sizes copied from random places of one large buffer.
  std::vector<std::byte> source(std::min(floor_buffer_cap, std::max<uint64_t>(index.manifest().total_bytes, 1)),
                                std::byte{1});
  auto memcpy_of = [&](std::size_t first, std::size_t count) {
    uint64_t at = 0;
    for (std::size_t i = first; i < first + count; ++i) {
      const uint64_t len = std::min<uint64_t>(index.entry(ids[i], field).length, source.size());
      const uint64_t from = (ids[i] * 0x9E3779B97F4A7C15ull) % (source.size() - len + 1);
      if (dest.size() < at + len) dest.resize(at + len);
      std::memcpy(dest.data() + at, source.data() + from, len);
      at += len;
    }
    return at;
  };
  time_calls("warm-up", 128, ids, batch_of);
  std::vector<StoreResult> results;
  for (uint64_t b : opts.batches) {
    if (b == 0) throw UsageError("--batch sizes must be > 0");
    results.push_back(time_calls("memcpy-floor", b, ids, memcpy_of));
    results.push_back(time_calls("get_batch", b, ids, batch_of));
  }
  print(results);
  for (std::size_t i = 0; i + 1 < results.size(); i += 2) {
    fmt::print("batch {}: get_batch costs {:.2f}x the memcpy floor per row\n", results[i].batch,
               results[i + 1].stats.mean / results[i].stats.mean);
  }
  if (results.size() >= 4) {
    fmt::print("batch {} vs batch {}: {:.1f}x cheaper per row\n", results.back().batch, results[1].batch,
               results[1].stats.mean / results.back().stats.mean);
  }
  if (opts.json.empty()) return;
  JsonWriter j;
  j.begin_object().field("bench", "store").field("store", opts.store).field("dataset", opts.dataset);
  j.field("field", name).field("samples", ids.size()).key("results").begin_array();
  for (const auto& r : results) {
    j.begin_object().field("mode", r.mode).field("batch", r.batch).field("bytes", r.bytes).field("seconds", r.seconds);
    j.field("mean_us_per_row", r.stats.mean).field("p50_us_per_row", r.stats.p50).field("p99_us_per_row", r.stats.p99);
    j.field("p999_us_per_row", r.stats.p999).field("max_us_per_row", r.stats.max).end_object();
  }
  j.end_array().end_object();
  write_text_file(opts.json, j.str());
}

}  // namespace ddstage::cli
