#include "bench/bench_flatten.hpp"

#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "bench/bench_clock.hpp"
#include "bench/bench_report.hpp"
#include "bench/page_cache.hpp"
#include "commands/flatten_cmd.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "support/json_writer.hpp"
#include "support/output_file.hpp"
#include "support/progress_line.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlattenOptions {
  FlattenOptions flatten;
  std::string work_dir;
  BenchOutputs outputs;
  bool warm = false;
};

struct FlattenRun {
  double seconds = 0;
  uint64_t bytes = 0;
  uint64_t packed = 0;
};

FlattenRun timed_flatten(const FlattenOptions& opts, const Settings& settings,
                         const std::string& out) {
  auto request = make_request(opts, settings);
  const auto t0 = Clock::now();
  IndexWriter writer(
      {.out = out, .force = true, .pack_bytes = settings.get_size("flatten.pack_size")});
  formats::flatten(request, writer);
  writer.commit();
  return {seconds_since(t0), writer.bytes_written(), writer.packed_bytes()};
}

struct CatRun {
  uint64_t bytes = 0;  ///< the source files' bytes, as stored (compressed ones compressed)
  double seconds = 0;
};

/// Both steps go through the same source files, so they are compared in the files' bytes per
/// second (the inverse ratio of their times); the samples flatten decodes from them (more than
/// the files hold when they are compressed) are a column of their own, never set against cat.
void report_figures(const BenchFlattenOptions& opts, const Index& index, const CatRun& cat,
                    const FlattenRun& run) {
  const double samples_s = static_cast<double>(index.samples()) / run.seconds;
  const double cat_mbs = static_cast<double>(cat.bytes) / cat.seconds / 1e6;
  const double flatten_file_mbs = static_cast<double>(cat.bytes) / run.seconds / 1e6;
  const double flatten_sample_mbs = static_cast<double>(run.bytes) / run.seconds / 1e6;
  const double ratio = cat.seconds / run.seconds;
  fmt::print("sources read {} (page cache {})\n", opts.warm ? "warm" : "cold",
             opts.warm ? "kept" : "dropped before each step");
  fmt::print("{:<22} {:>12} {:>10} {:>12} {:>10} {:>12} {:>14}\n", "step", "file bytes", "seconds",
             "samples/s", "file MB/s", "sample bytes", "sample MB/s");
  fmt::print("{:<22} {:>12} {:>10.3f} {:>12} {:>10.1f} {:>12} {:>14}\n", "cat sources", cat.bytes,
             cat.seconds, "-", cat_mbs, "-", "-");
  fmt::print("{:<22} {:>12} {:>10.3f} {:>12.0f} {:>10.1f} {:>12} {:>14.1f}\n",
             run.packed ? "flatten --pack" : "flatten (in place)", cat.bytes, run.seconds,
             samples_s, flatten_file_mbs, run.bytes, flatten_sample_mbs);
  fmt::print(
      "file bytes: the source files as stored (what cat reads); sample bytes: the samples "
      "flatten decodes from them and indexes\n");
  fmt::print(
      "ratio: flatten goes through the source files at {:.0f}% of cat's speed (file bytes per "
      "second; {} samples, {} packed)\n",
      100.0 * ratio, index.samples(), human_bytes(static_cast<double>(run.packed)));
  if (opts.outputs.json.empty()) return;
  JsonWriter j;
  j.begin_object().field("schema", bench_json_schema).field("bench", "flatten");
  j.field("format", index.manifest().format).field("warm", opts.warm);
  j.field("samples", index.samples())
      .field("cat_bytes", cat.bytes)
      .field("cat_seconds", cat.seconds);
  j.field("cat_mb_per_s", cat_mbs).field("flatten_bytes", run.bytes);
  j.field("packed_bytes", run.packed).field("flatten_seconds", run.seconds);
  j.field("flatten_file_mb_per_s", flatten_file_mbs);
  j.field("flatten_sample_mb_per_s", flatten_sample_mbs);
  j.field("samples_per_second", samples_s).field("ratio_vs_cat", ratio).end_object();
  write_text_file(opts.outputs.json, j.str());
}

/// The CSV and the plot: both steps in the source files' bytes, so that their GB/s compare.
void write_cells(const BenchFlattenOptions& opts, const Index& index, const CatRun& cat,
                 const FlattenRun& run) {
  BenchReport report("flatten", "file");
  report.add({.dims = {{"step", "cat"}},
              .rows = index.samples(),
              .bytes = cat.bytes,
              .seconds = cat.seconds});
  report.add({.dims = {{"step", run.packed ? "flatten --pack" : "flatten"}},
              .rows = index.samples(),
              .bytes = cat.bytes,
              .seconds = run.seconds,
              .extras = {{"sample_bytes", static_cast<double>(run.bytes)},
                         {"packed_bytes", static_cast<double>(run.packed)}}});
  report.set_panels({{"source files, MB/s", {{"gb_per_s", "MB/s"}}, 1000},
                     {"seconds", {{"seconds", "seconds"}}}});
  // The JSON keeps its own layout (ddstage-bench(1) documents its fields).
  report.write({.csv = opts.outputs.csv, .plot = opts.outputs.plot});
}

void run_bench_flatten(const BenchFlattenOptions& opts, const CliContext& ctx) {
  opts.outputs.check();
  auto settings = ctx.resolve_settings();
  std::string templ = (std::filesystem::path(opts.work_dir) / "ddstage-bench-XXXXXX").string();
  if (!::mkdtemp(templ.data()))
    throw IoError("cannot create a work directory in " + opts.work_dir, errno);
  const std::filesystem::path work = templ;
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{work};
  const std::string out = (work / "bench.ddx").string();

  // First pass warms the page cache for both measurements and tells which files are sources.
  timed_flatten(opts.flatten, settings, out);
  auto index = Index::open(out);
  // Both measurements read the origin the way a real flatten does: once, cold.
  const auto sources = index_files(index, {FileKind::source, FileKind::copied});
  if (!opts.warm) drop_cached_pages(sources);
  const auto t_cat = Clock::now();
  const uint64_t cat_bytes = read_sequentially(sources);
  const double cat_s = seconds_since(t_cat);
  if (!opts.warm) drop_cached_pages(sources);
  const auto run = timed_flatten(opts.flatten, settings, out);

  report_figures(opts, index, {cat_bytes, cat_s}, run);
  write_cells(opts, index, {cat_bytes, cat_s}, run);
}

}  // namespace

void setup_bench_flatten(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchFlattenOptions>();
  auto* sub = bench.add_subcommand(
      "flatten", "Flatten throughput vs a sequential read (cat) of the same sources");
  add_flatten_options(*sub, ctx, opts->flatten);
  const char* tmp = std::getenv("TMPDIR");
  opts->work_dir = tmp && *tmp ? tmp : "/tmp";
  sub->add_option("--work-dir", opts->work_dir, "Where the throw-away index is written")
      ->capture_default_str();
  add_bench_output_options(*sub, opts->outputs);
  sub->add_flag("--warm", opts->warm,
                "Keep the sources in the page cache (default: drop them before each step)");
  sub->callback([opts, &ctx] { run_bench_flatten(*opts, ctx); });
}

}  // namespace ddstage::cli
