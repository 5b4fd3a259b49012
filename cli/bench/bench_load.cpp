#include "bench/bench_load.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <span>

#include <fmt/format.h>

#include "bench/bench_report.hpp"
#include "bench/page_cache.hpp"
#include "ddstage/index.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/store_control.hpp"
#include "support/json_writer.hpp"
#include "support/output_file.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchLoadOptions {
  std::string store;
  std::string index;
  std::string name;
  unsigned streams = 0;
  std::string json;
  bool warm = false;
};

/// The baselines count every byte of the source and pack files; the load counts the rows'
/// bytes (the index's total_bytes), without verification.
struct LoadFigures {
  uint64_t cat_bytes = 0;
  double cat_seconds = 0;
  double shm_seconds = 0;
  LoadResult load;
  double cat_mbs() const { return static_cast<double>(cat_bytes) / cat_seconds / 1e6; }
  double shm_mbs() const { return static_cast<double>(cat_bytes) / shm_seconds / 1e6; }
  double load_mbs() const { return static_cast<double>(load.bytes) / load.seconds / 1e6; }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// What `cat FILES > /dev/shm/X` does, into a segment reserved up front as a load's is: the
/// files copied into fresh shared memory by one stream through a 1 MiB buffer. The segment
/// is returned so that removing it is not timed.
ShmSegment copy_into_shared_memory(const std::vector<std::filesystem::path>& files,
                                   uint64_t bytes) {
  auto shm = ShmSegment::create(fmt::format("/ddstage-bench-load-{}-cat", ::getpid()), bytes);
  std::vector<std::byte> buffer(1u << 20);
  uint64_t at = 0;
  for (const auto& path : files) {
    const auto fd = FileDescriptor::open(path, O_RDONLY);
    // A file that grew since it was read is copied up to the bytes reserved.
    const uint64_t size = std::min(fd.size(), bytes - at);
    for (uint64_t done = 0; done < size;) {
      const std::span<std::byte> part(buffer.data(),
                                      std::min<uint64_t>(buffer.size(), size - done));
      fd.pread_exact(part, done);
      shm.file().pwrite_all(part, at + done);
      done += part.size();
    }
    at += size;
  }
  return shm;
}

/// The baselines first, then the load, each after dropping the files' pages unless warm (then
/// an untimed read warms them for all three).
LoadFigures measure(const BenchLoadOptions& opts, const std::string& name,
                    const Settings& settings) {
  const auto index = Index::open(opts.index);
  const auto files = index_files(index, {FileKind::source, FileKind::pack});
  auto control = store_control(opts.store, settings);
  LoadFigures f;
  if (opts.warm)
    read_sequentially(files);
  else
    drop_cached_pages(files);
  auto t0 = Clock::now();
  f.cat_bytes = read_sequentially(files);
  f.cat_seconds = seconds_since(t0);
  if (!opts.warm) drop_cached_pages(files);
  t0 = Clock::now();
  {
    const auto copy = copy_into_shared_memory(files, f.cat_bytes);
    f.shm_seconds = seconds_since(t0);
  }
  if (!opts.warm) drop_cached_pages(files);
  // The store's own timing (slowest rank, from the request's arrival), not this client's.
  f.load = control.load({.index = opts.index, .name = name, .streams = opts.streams});
  control.unload(name);
  return f;
}

void run_bench_load(BenchLoadOptions opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  opts.store = store_dir(opts.store, settings);
  const std::string name =
      opts.name.empty() ? fmt::format("ddstage-bench-load-{}", ::getpid()) : opts.name;
  const auto f = measure(opts, name, settings);
  const unsigned streams = opts.streams ? opts.streams : ShardLoadOptions{}.streams;
  const auto ranks = StoreDescriptor::read(opts.store).ranks.size();
  const double ratio = f.load_mbs() / f.cat_mbs();
  const double shm_ratio = f.load_mbs() / f.shm_mbs();
  fmt::print("files read {} (page cache {})\n", opts.warm ? "warm" : "cold",
             opts.warm ? "filled before the first step" : "dropped before each step");
  fmt::print("{:<40} {:>14} {:>10} {:>10}\n", "step", "bytes", "seconds", "MB/s");
  fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n", "sequential read (cat)", f.cat_bytes,
             f.cat_seconds, f.cat_mbs());
  fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n", "sequential copy (cat > /dev/shm)", f.cat_bytes,
             f.shm_seconds, f.shm_mbs());
  fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n",
             fmt::format("load ({} ranks, {} streams)", ranks, streams), f.load.bytes,
             f.load.seconds, f.load_mbs());
  fmt::print(
      "ratio: load at {:.0f}% of the sequential read's bandwidth, {:.0f}% of the copy's ({} "
      "samples; the load counts row bytes, the others whole files)\n",
      100.0 * ratio, 100.0 * shm_ratio, f.load.samples);
  if (!opts.json.empty()) {
    JsonWriter j;
    j.begin_object()
        .field("schema", bench_json_schema)
        .field("bench", "load")
        .field("warm", opts.warm)
        .field("ranks", static_cast<uint64_t>(ranks));
    j.field("streams", streams).field("samples", f.load.samples).field("bytes", f.load.bytes);
    j.field("cat_bytes", f.cat_bytes)
        .field("cat_seconds", f.cat_seconds)
        .field("cat_mb_per_s", f.cat_mbs());
    j.field("shm_copy_seconds", f.shm_seconds).field("shm_copy_mb_per_s", f.shm_mbs());
    j.field("load_seconds", f.load.seconds).field("load_mb_per_s", f.load_mbs());
    j.field("ratio_vs_cat", ratio).field("ratio_vs_shm_copy", shm_ratio).end_object();
    write_text_file(opts.json, j.str());
  }
}

}  // namespace

void setup_bench_load(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchLoadOptions>();
  auto* sub = bench.add_subcommand(
      "load", "A store's load bandwidth vs a sequential read (cat) of the same files");
  sub->add_option("--store", opts->store,
                  "The store directory (holds store.yaml); default: DDSTAGE_STORE");
  sub->add_option("dataset", opts->index, "The index directory (DATASET.ddx)")->required();
  sub->add_option("--name", opts->name,
                  "Name to load under, unloaded afterwards (default: a temporary one)");
  sub->add_option("--streams", opts->streams, "Reader threads per rank (default: the server's)")
      ->check(CLI::Range(1u, max_load_streams));
  sub->add_option("--json", opts->json, "Also write every figure as JSON to this file");
  sub->add_flag("--warm", opts->warm,
                "Keep the files in the page cache (default: drop them before each step)");
  sub->callback([opts, &ctx] { run_bench_load(*opts, ctx); });
}

}  // namespace ddstage::cli
