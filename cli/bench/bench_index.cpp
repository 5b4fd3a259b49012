#include "bench/bench_index.hpp"

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "bench/bench_clock.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// Asks the kernel to drop index.bin's and manifest.yaml's cached pages: "cold-ish" (no root
/// cache drop, and the directory entries stay cached).
void evict(const fs::path& ddx) {
  for (const char* name : {"index.bin", "manifest.yaml"}) {
    auto fd = FileDescriptor::open(ddx / name, O_RDONLY);
    fd.sync();
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
}

/// One cell: flattens rows of row_bytes from src through put_rows_in_place (read in 16 MiB
/// pieces, as a format streaming a contiguous array would), then opens and reads it back.
BenchCell measure(const BenchIndexOptions& opts, const fs::path& src, uint64_t rows,
                  uint64_t block_bytes) {
  const auto ddx = fs::path(opts.dir) / fmt::format("bench-{}-{}.ddx", rows, block_bytes);
  std::error_code ec;
  fs::remove_all(ddx, ec);
  const auto t0 = Clock::now();
  {
    IndexWriter w({.out = ddx, .block_bytes = block_bytes});
    w.set_format("bench");
    w.define({{"x", DType::uint8, {opts.row_bytes}, false, opts.row_bytes, "bench"}}, rows);
    w.expect_bytes(rows * opts.row_bytes);
    const auto file = w.add_source(src);
    const auto fd = FileDescriptor::open(src, O_RDONLY);
    const uint64_t piece = std::max<uint64_t>(1, (16u << 20) / opts.row_bytes);
    std::vector<std::byte> buffer(piece * opts.row_bytes);
    for (uint64_t first = 0; first < rows; first += piece) {
      const uint64_t count = std::min(piece, rows - first);
      const auto bytes = std::span(buffer).first(count * opts.row_bytes);
      fd.pread_exact(bytes, first * opts.row_bytes);
      w.put_rows_in_place(0, first, count, file, first * opts.row_bytes, opts.row_bytes,
                          opts.row_bytes, bytes);
    }
    w.commit();
  }
  const double flatten_s = seconds_since(t0);
  const uint64_t index_bytes = fs::file_size(ddx / "index.bin");

  evict(ddx);
  auto t1 = Clock::now();
  auto index = Index::open(ddx);
  const double cold_ms = seconds_since(t1) * 1e3;
  double warm_ms = 1e300;
  for (int i = 0; i < 5; ++i) {
    t1 = Clock::now();
    auto again = Index::open(ddx);
    warm_ms = std::min(warm_ms, seconds_since(t1) * 1e3);
  }

  // Verified random reads: each reads and hashes the row's whole block.
  std::mt19937_64 rng(1);
  OriginReader reader(index, {.verify = true});
  std::vector<std::byte> row(opts.row_bytes);
  uint64_t checked = 0;
  t1 = Clock::now();
  for (uint64_t i = 0; i < opts.verify_samples; ++i) {
    const uint64_t id = rng() % rows;
    reader.read(0, {&id, 1}, row);
    ++checked;
  }
  const double verify_us = seconds_since(t1) * 1e6 / static_cast<double>(checked);

  const uint64_t v2_bytes = 128 + rows * 32;  // format 2: one 32-byte entry per row
  BenchCell c{.dims = {{"rows", rows}, {"block_bytes", block_bytes}},
              .rows = rows,
              .bytes = rows * opts.row_bytes,
              .seconds = flatten_s};
  c.extras = {{"index_bytes", static_cast<double>(index_bytes)},
              {"format2_bytes", static_cast<double>(v2_bytes)},
              {"blocks", static_cast<double>(index.blocks(0))},
              {"open_cold_ms", cold_ms},
              {"open_warm_ms", warm_ms},
              {"verified_read_us", verify_us}};
  fs::remove_all(ddx, ec);
  return c;
}

}  // namespace

void run_bench_index(const BenchIndexOptions& opts, const CliContext&) {
  opts.outputs.check();
  if (!fs::is_directory(opts.dir)) throw UsageError("--dir " + opts.dir + " is not a directory");
  BenchReport report("index", "row");
  report.set_plot_x("rows");
  // No per-call latencies here: what a block size costs is index size, open and read time.
  report.set_panels({{"flatten, GB/s", {{"gb_per_s", "GB/s"}}},
                     {"index bytes", {{"index_bytes", "index"}}},
                     {"open (cold), ms", {{"open_cold_ms", "cold"}}},
                     {"verified read, µs", {{"verified_read_us", "read"}}}});
  report.describe("source", fmt::format("one sparse file of {}-byte rows, read in 16 MiB pieces "
                                        "(page cache), handed over with put_rows_in_place",
                                        opts.row_bytes));
  report.describe("figures",
                  "seconds: flatten (read + hash + commit); open cold-ish: after "
                  "fadvise DONTNEED of index.bin and manifest.yaml; warm: best of 5; "
                  "verified_read_us: one random row read with verify (its block)");
  const auto src = fs::path(opts.dir) / "bench-index-source.bin";
  for (uint64_t rows : opts.rows) {
    {
      auto fd = FileDescriptor::open(src, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (::ftruncate(fd.get(), static_cast<off_t>(rows * opts.row_bytes)) != 0)
        throw IoError("ftruncate " + src.string(), errno);
    }
    for (uint64_t block : opts.block_bytes) report.add(measure(opts, src, rows, block));
    fs::remove(src);
  }
  report.print();
  report.write(opts.outputs);
}

void setup_bench_index(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchIndexOptions>();
  auto* sub = bench.add_subcommand(
      "index", "Index size, open and flatten time for huge 1-D datasets, per checksum block size");
  sub->add_option("--dir", opts->dir, "Directory for the sparse source and indexes")->required();
  sub->add_option("--rows", opts->rows, "Row counts (e.g. 100000000 1000000000)")
      ->capture_default_str();
  sub->add_option("--block-bytes", opts->block_bytes, "Checksum block sizes to compare")
      ->capture_default_str();
  sub->add_option("--row-bytes", opts->row_bytes, "Bytes per row")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--verify-samples", opts->verify_samples, "Random verified reads timed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_bench_output_options(*sub, opts->outputs);
  sub->callback([opts, &ctx] { run_bench_index(*opts, ctx); });
}

}  // namespace ddstage::cli
