#include "bench/bench_flatten.hpp"

#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

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
  std::string json;
  bool warm = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

void run_bench_flatten(const BenchFlattenOptions& opts, const CliContext& ctx) {
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

  const double samples_s = static_cast<double>(index.samples()) / run.seconds;
  const double flatten_mbs = static_cast<double>(run.bytes) / run.seconds / 1e6;
  const double cat_mbs = static_cast<double>(cat_bytes) / cat_s / 1e6;
  fmt::print("sources read {} (page cache {})\n", opts.warm ? "warm" : "cold",
             opts.warm ? "kept" : "dropped before each step");
  fmt::print("{:<22} {:>12} {:>10} {:>12} {:>10}\n", "step", "bytes", "seconds", "samples/s",
             "MB/s");
  fmt::print("{:<22} {:>12} {:>10.3f} {:>12} {:>10.1f}\n", "cat sources", cat_bytes, cat_s, "-",
             cat_mbs);
  fmt::print("{:<22} {:>12} {:>10.3f} {:>12.0f} {:>10.1f}\n",
             run.packed ? "flatten --pack" : "flatten (in place)", run.bytes, run.seconds,
             samples_s, flatten_mbs);
  fmt::print("ratio: flatten reads at {:.0f}% of cat's bandwidth ({} samples, {} packed)\n",
             100.0 * flatten_mbs / cat_mbs, index.samples(),
             human_bytes(static_cast<double>(run.packed)));
  if (!opts.json.empty()) {
    JsonWriter j;
    j.begin_object()
        .field("bench", "flatten")
        .field("format", index.manifest().format)
        .field("warm", opts.warm);
    j.field("samples", index.samples()).field("cat_bytes", cat_bytes).field("cat_seconds", cat_s);
    j.field("flatten_bytes", run.bytes)
        .field("packed_bytes", run.packed)
        .field("flatten_seconds", run.seconds);
    j.field("samples_per_second", samples_s)
        .field("ratio_vs_cat", flatten_mbs / cat_mbs)
        .end_object();
    write_text_file(opts.json, j.str());
  }
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
  sub->add_option("--json", opts->json, "Also write every figure as JSON to this file");
  sub->add_flag("--warm", opts->warm,
                "Keep the sources in the page cache (default: drop them before each step)");
  sub->callback([opts, &ctx] { run_bench_flatten(*opts, ctx); });
}

}  // namespace ddstage::cli
