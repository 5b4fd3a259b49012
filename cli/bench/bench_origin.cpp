#include "bench/bench_origin.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/page_cache.hpp"
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

/// What WebDataset does with its shards (webdataset.tariterators): stream each through Python's
/// tarfile and read every regular member in order. Prints one line per member: the nanoseconds
/// from the previous member (or the shard's open) to its last byte read, and its size.
constexpr const char* tarfile_script = R"(import sys, tarfile, time
for path in sys.argv[1:]:
    t0 = time.perf_counter_ns()
    with tarfile.open(path, "r|*") as t:
        for m in t:
            if m.isreg():
                n = len(t.extractfile(m).read())
                print(time.perf_counter_ns() - t0, n)
                t0 = time.perf_counter_ns()
)";

/// Runs `python3 -c SCRIPT ARGS...` and returns its standard output; Error if it cannot start
/// or does not exit 0.
std::string run_python(const char* script, const std::vector<std::string>& args) {
  std::vector<std::string> words = {"python3", "-c", script};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) throw IoError("pipe", errno);
  const pid_t pid = ::fork();
  if (pid < 0) throw IoError("fork", errno);
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error(ErrorKind::runtime, fmt::format("python3 with tarfile failed (status {})", status));
  }
  return text;
}

/// The tarfile baseline over every shard of a tar index, after reading them once (so it reads
/// the page cache, as index+pread does). A sample's time is the sum of its members' (every
/// field but the last, which is the member name or WebDataset key); the bytes must add up to
/// the index's, or the run counts as a mismatch.
ModeResult time_tarfile(const Index& index) {
  const auto shards = index_files(index, {FileKind::source, FileKind::copied});
  read_sequentially(shards);
  std::vector<std::string> args;
  for (const auto& s : shards) args.push_back(s.string());
  std::istringstream lines(run_python(tarfile_script, args));
  const auto width = index.fields().size() - 1;
  ModeResult r{"python-tarfile"};
  uint64_t ns = 0, length = 0, members = 0, sample_ns = 0;
  while (lines >> ns >> length) {
    sample_ns += ns;
    r.bytes += length;
    if (++members % width == 0) {
      r.ns.record(sample_ns);
      sample_ns = 0;
    }
  }
  uint64_t expected = 0;
  for (uint64_t s = 0; s < index.samples(); ++s) {
    for (uint32_t f = 0; f < width; ++f) expected += index.entry(s, f).length;
  }
  r.mismatches = members != index.samples() * width || r.bytes != expected;
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
  std::optional<std::string> tarfile_failed;
  if (index.manifest().format == "tar") {
    try {
      results.push_back(time_tarfile(index));
    } catch (const Error& e) {
      tarfile_failed = e.what();
    }
  }
  BenchReport report("origin", "sample");
  report.set_panels({{"µs per sample", {{"p50_us", "p50"}, {"mean_us", "mean"}, {"p99_us", "p99"}}},
                     {"GB/s", {{"gb_per_s", "GB/s"}}}});
  report.describe("dataset",
                  fmt::format("{} ({} samples, {} fields, format {})", index.dir().string(),
                              index.samples(), index.fields().size(), index.manifest().format));
  report.describe("samples", fmt::format("{} random ones, seed {}, every field of each", ids.size(),
                                         opts.seed));
  report.describe("page cache", "warm: the samples are read once before timing");
  if (index.manifest().format == "tar") {
    report.describe("python-tarfile",
                    tarfile_failed ? "n/a: " + *tarfile_failed
                                   : "every sample, shard by shard, streamed through Python's "
                                     "tarfile as WebDataset does (shards read once before)");
  } else if (results.size() == 1) {
    report.describe("hdf5-api", "n/a: not an HDF5 source (" + index.manifest().format + ")");
  }
  for (const auto& r : results) {
    report.add(cell_of(r, r.mode == "python-tarfile" ? r.ns.count() : ids.size()));
  }
  if (results.size() == 2) {
    const auto& pread = results[0].ns;
    const auto& other = results[1];
    report.note(fmt::format(
        "ratio: {} is {:.1f}x the cost of index+pread per sample (mean), {:.1f}x at p50",
        other.mode, other.ns.mean() / pread.mean(),
        static_cast<double>(other.ns.percentile(0.5)) /
            static_cast<double>(pread.percentile(0.5))));
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
  auto* sub = bench.add_subcommand(
      "origin",
      "Per-sample reads: index + pread vs the HDF5 API (or, for tar shards, Python's tarfile)");
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
