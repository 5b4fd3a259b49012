#include "bench/bench_load.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "bench/bench_clock.hpp"
#include "bench/bench_report.hpp"
#include "bench/page_cache.hpp"
#include "ddstage/error.hpp"
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
  BenchOutputs outputs;
  bool warm = false;
};

/// The baselines count every byte of the source and pack files; the load counts the rows'
/// bytes (the index's total_bytes), without verification.
struct LoadFigures {
  uint64_t cat_bytes = 0;
  double cat_seconds = 0;
  std::optional<double> shm_seconds;  ///< none when the copy baseline was skipped
  std::string shm_skipped;            ///< why it was
  LoadResult load;
  double cat_mbs() const { return static_cast<double>(cat_bytes) / cat_seconds / 1e6; }
  std::optional<double> shm_mbs() const {
    if (!shm_seconds) return std::nullopt;
    return static_cast<double>(cat_bytes) / *shm_seconds / 1e6;
  }
  double load_mbs() const { return static_cast<double>(load.bytes) / load.seconds / 1e6; }
};

/// Why a copy of `bytes` into /dev/shm must not run, or empty. Whole files can be many times
/// the rows a load holds (an HDF5 file indexed in place with other large fields): the copy
/// must not fail the bench where the load fits, nor leave the node's other users of /dev/shm
/// (MPI, the store's segments) less than a twentieth of it free. A fraction, not a fixed
/// amount: containers often give /dev/shm only 64 MiB.
std::string shm_copy_unfit(uint64_t bytes) {
  struct statvfs st {};
  if (::statvfs("/dev/shm", &st) != 0) throw IoError("statvfs /dev/shm", errno);
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  const uint64_t margin = static_cast<uint64_t>(st.f_blocks) * st.f_frsize / 20;
  if (bytes + margin <= free) return {};
  return fmt::format(
      "the files' {} bytes do not fit in /dev/shm with {} bytes to spare ({} "
      "bytes free)",
      bytes, margin, free);
}

/// What `cat FILES > /dev/shm/X` does, into a segment reserved up front as a load's is: the
/// files copied into fresh shared memory by one stream through a 1 MiB buffer. The segment
/// is returned so that freeing it is not timed.
ShmSegment copy_into_shared_memory(const std::vector<std::filesystem::path>& files,
                                   uint64_t bytes) {
  auto shm = ShmSegment::create(fmt::format("/ddstage-bench-load-{}-cat", ::getpid()), bytes);
  // Nameless from here: its memory goes back when this process lets go of it, however it ends
  // (an error, Ctrl-C, SIGKILL), and nothing is left in /dev/shm to clean.
  shm.unlink();
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
  f.shm_skipped = shm_copy_unfit(f.cat_bytes);
  if (f.shm_skipped.empty()) {
    t0 = Clock::now();
    const auto copy = copy_into_shared_memory(files, f.cat_bytes);
    f.shm_seconds = seconds_since(t0);
  }
  if (!opts.warm) drop_cached_pages(files);
  // The store's own timing (slowest rank, from the request's arrival), not this client's.
  f.load = control.load({.index = opts.index, .name = name, .streams = opts.streams});
  control.unload(name);
  return f;
}

/// How the bench was run, for the report.
struct LoadSetup {
  bool warm = false;
  std::size_t ranks = 0;
  unsigned streams = 0;
};

void print_figures(const LoadFigures& f, const LoadSetup& setup) {
  fmt::print("files read {} (page cache {})\n", setup.warm ? "warm" : "cold",
             setup.warm ? "filled before the first step" : "dropped before each step");
  fmt::print("{:<40} {:>14} {:>10} {:>10}\n", "step", "bytes", "seconds", "MB/s");
  fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n", "sequential read (cat)", f.cat_bytes,
             f.cat_seconds, f.cat_mbs());
  if (const auto shm_mbs = f.shm_mbs()) {
    fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n", "sequential copy (cat > /dev/shm)",
               f.cat_bytes, *f.shm_seconds, *shm_mbs);
  } else {
    fmt::print("{:<40} {:>14} {:>21}\n", "sequential copy (cat > /dev/shm)", f.cat_bytes,
               "skipped");
  }
  fmt::print("{:<40} {:>14} {:>10.3f} {:>10.1f}\n",
             fmt::format("load ({} ranks, {} streams)", setup.ranks, setup.streams), f.load.bytes,
             f.load.seconds, f.load_mbs());
  const std::string vs_copy =
      f.shm_mbs() ? fmt::format("{:.0f}% of the copy's", 100.0 * f.load_mbs() / *f.shm_mbs())
                  : std::string("the copy not run");
  fmt::print(
      "ratio: load at {:.0f}% of the sequential read's bandwidth, {} ({} samples; the load "
      "counts row bytes, the others whole files)\n",
      100.0 * f.load_mbs() / f.cat_mbs(), vs_copy, f.load.samples);
  if (!f.shm_skipped.empty()) fmt::print("sequential copy skipped: {}\n", f.shm_skipped);
}

/// The copy baseline's figures are null when it was skipped, and shm_copy_skipped says why.
void write_json(const std::string& path, const LoadFigures& f, const LoadSetup& setup) {
  JsonWriter j;
  j.begin_object()
      .field("schema", bench_json_schema)
      .field("bench", "load")
      .field("warm", setup.warm)
      .field("ranks", static_cast<uint64_t>(setup.ranks));
  j.field("streams", setup.streams).field("samples", f.load.samples).field("bytes", f.load.bytes);
  j.field("cat_bytes", f.cat_bytes)
      .field("cat_seconds", f.cat_seconds)
      .field("cat_mb_per_s", f.cat_mbs());
  const auto shm_mbs = f.shm_mbs();
  if (shm_mbs) {
    j.field("shm_copy_seconds", *f.shm_seconds).field("shm_copy_mb_per_s", *shm_mbs);
    j.key("shm_copy_skipped").null();
  } else {
    j.key("shm_copy_seconds").null().key("shm_copy_mb_per_s").null();
    j.field("shm_copy_skipped", f.shm_skipped);
  }
  j.field("load_seconds", f.load.seconds).field("load_mb_per_s", f.load_mbs());
  j.field("ratio_vs_cat", f.load_mbs() / f.cat_mbs());
  if (shm_mbs)
    j.field("ratio_vs_shm_copy", f.load_mbs() / *shm_mbs);
  else
    j.key("ratio_vs_shm_copy").null();
  write_text_file(path, j.end_object().str());
}

/// The CSV and the plot: each step a cell, the copy only where it ran.
void write_cells(const BenchOutputs& outputs, const LoadFigures& f) {
  BenchReport report("load", "file");
  const uint64_t rows = f.load.samples;
  report.add(
      {.dims = {{"step", "cat"}}, .rows = rows, .bytes = f.cat_bytes, .seconds = f.cat_seconds});
  if (f.shm_seconds) {
    report.add({.dims = {{"step", "cat > /dev/shm"}},
                .rows = rows,
                .bytes = f.cat_bytes,
                .seconds = *f.shm_seconds});
  }
  report.add(
      {.dims = {{"step", "load"}}, .rows = rows, .bytes = f.load.bytes, .seconds = f.load.seconds});
  report.set_panels(
      {{"MB/s", {{"gb_per_s", "MB/s"}}, 1000}, {"seconds", {{"seconds", "seconds"}}}});
  // The JSON keeps its own layout (ddstage-bench(1) documents its fields).
  report.write({.csv = outputs.csv, .plot = outputs.plot});
}

void run_bench_load(BenchLoadOptions opts, const CliContext& ctx) {
  opts.outputs.check();
  const auto settings = ctx.resolve_settings();
  opts.store = store_dir(opts.store, settings);
  const std::string name =
      opts.name.empty() ? fmt::format("ddstage-bench-load-{}", ::getpid()) : opts.name;
  const auto f = measure(opts, name, settings);
  const LoadSetup setup{.warm = opts.warm,
                        .ranks = StoreDescriptor::read(opts.store).ranks.size(),
                        .streams = opts.streams ? opts.streams : ShardLoadOptions{}.streams};
  print_figures(f, setup);
  if (!opts.outputs.json.empty()) write_json(opts.outputs.json, f, setup);
  write_cells(opts.outputs, f);
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
  add_bench_output_options(*sub, opts->outputs);
  sub->add_flag("--warm", opts->warm,
                "Keep the files in the page cache (default: drop them before each step)");
  sub->callback([opts, &ctx] { run_bench_load(*opts, ctx); });
}

}  // namespace ddstage::cli
