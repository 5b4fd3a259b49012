#include "bench/bench_tier.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/bench_clock.hpp"
#include "bench/bench_report.hpp"
#include "bench/synthetic_dataset.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/human_bytes.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shm_segment.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchTierOptions {
  std::string dir;
  std::string origin;
  std::vector<std::string> row_bytes{"3K", "1M"};
  std::string bytes = "256M";
  uint64_t reads = 1000;
  uint64_t seed = 1;
  std::vector<std::string> caches{"warm", "cold"};
  BenchOutputs outputs;
};

/// A scratch directory of this run under `parent`, removed with what is in it.
class ScratchDir {
 public:
  explicit ScratchDir(const fs::path& parent) {
    std::string path = (parent / "ddstage-bench-tier-XXXXXX").string();
    if (!::mkdtemp(path.data())) throw IoError("mkdtemp " + path, errno);
    m_path = path;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const noexcept { return m_path; }

 private:
  fs::path m_path;
};

/// One row size's copies of one synthetic dataset: its origin file, its shard loaded into
/// shared memory and into a tier file by load_shard, as a rank loads them. Both names are gone
/// once this exists (the mappings stay), so nothing is left behind, however the bench ends.
struct Copies {
  Copies(const fs::path& origin_dir, const fs::path& tier_dir, uint64_t row_bytes, uint64_t rows,
         uint64_t seed)
      : index(Index::open(write_synthetic_dataset(origin_dir, row_bytes, rows, seed))),
        layout(index, {0, index.samples()}),
        origin(FileDescriptor::open(origin_dir / fmt::format("rows-{}.bin", row_bytes), O_RDONLY)) {
    const std::string base = fmt::format("ddstage-bench-tier-{}-{}", ::getpid(), row_bytes);
    auto t0 = Clock::now();
    memory = load_shard(index, layout.range(), "/" + base);
    memory_load_seconds = seconds_since(t0);
    memory.unlink();
    const auto name = (tier_dir / base).string();
    t0 = Clock::now();
    {
      auto owner = load_shard(index, layout.range(), name);
      // On the disk, not only in the page cache: a load is done when its bytes are stored.
      if (::fdatasync(owner.file().get()) != 0) throw IoError("fdatasync " + name, errno);
      tier_load_seconds = seconds_since(t0);
      tier = ShmSegment::open_read_only(name);
    }  // the owner unlinks the name; the reader's mapping keeps the file
    const auto fields = static_cast<uint32_t>(index.fields().size());
    memory_view = ShardView(memory.bytes(), fields, layout.range());
    tier_view = ShardView(tier.bytes(), fields, layout.range());
  }

  Index index;
  ShardLayout layout;
  FileDescriptor origin;
  ShmSegment memory;
  ShmSegment tier;
  ShardView memory_view;
  ShardView tier_view;
  double memory_load_seconds = 0;
  double tier_load_seconds = 0;
};

/// Drops a whole file's pages from the page cache, and from the mapping `mapped` when given
/// (mapped pages cannot be dropped): the next read goes to the disk. Whole files, not the row
/// about to be read: the page cache holds large folios, and a folio only partly in a dropped
/// range stays (here most 3 KB "cold" reads then hit memory). Clean pages only: the files were
/// synced.
void drop_pages(const FileDescriptor& fd, std::span<const std::byte> mapped = {}) {
  if (!mapped.empty())
    ::madvise(const_cast<std::byte*>(mapped.data()), mapped.size(), MADV_DONTNEED);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
}

/// How one mode reads row `id` into dest, and drops its file's pages for a cold read.
struct Mode {
  std::string name;
  std::function<void(uint64_t id, std::span<std::byte> dest)> read;
  std::function<void()> drop;  ///< empty: memory, which has no cold
};

std::vector<Mode> modes_of(const Copies& c, uint64_t row_bytes) {
  const auto tier_drop = [&c] { drop_pages(c.tier.file(), c.tier.bytes()); };
  return {
      {"memory",
       [&c](uint64_t id, std::span<std::byte> dest) {
         const auto row = c.memory_view.row(id, 0);
         std::memcpy(dest.data(), row.data(), row.size());
       },
       {}},
      {"tier-mapped",
       [&c](uint64_t id, std::span<std::byte> dest) {
         const auto row = c.tier_view.row(id, 0);
         std::memcpy(dest.data(), row.data(), row.size());
       },
       tier_drop},
      {"tier-pread",
       [&c](uint64_t id, std::span<std::byte> dest) {
         c.tier.file().pread_exact(dest, c.layout.row_offset(id, 0));
       },
       tier_drop},
      {"origin-pread",
       [&c, row_bytes](uint64_t id, std::span<std::byte> dest) {
         c.origin.pread_exact(dest, id * row_bytes);
       },
       [&c] { drop_pages(c.origin); }},
  };
}

/// Times each read of mode over ids (cold: the file's pages dropped first, untimed) and checks
/// its bytes against the shard in memory (untimed), so a fast wrong answer cannot win.
BenchCell time_cell(const Copies& c, const Mode& mode, bool cold, uint64_t row_bytes,
                    const std::vector<uint64_t>& ids) {
  std::vector<std::byte> dest(row_bytes);
  BenchCell cell{.dims = {{"row_bytes", row_bytes},
                          {"cache", std::string(cold ? "cold" : "warm")},
                          {"mode", mode.name}}};
  // The VM drops idle file pages: a warm cell reads its rows once first.
  if (!cold) {
    for (uint64_t id : ids) mode.read(id, dest);
  }
  uint64_t mismatches = 0;
  for (uint64_t id : ids) {
    if (cold) mode.drop();
    const auto t0 = Clock::now();
    mode.read(id, dest);
    cell.ns_per_row.record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    const auto expect = c.memory_view.row(id, 0);
    mismatches += std::memcmp(dest.data(), expect.data(), row_bytes) != 0;
  }
  cell.rows = ids.size();
  cell.bytes = ids.size() * row_bytes;
  cell.seconds = static_cast<double>(cell.ns_per_row.sum()) / 1e9;
  cell.extras = {{"mismatches", static_cast<double>(mismatches)}};
  return cell;
}

uint64_t size_option(const std::string& text, const char* flag) {
  const auto v = parse_size(text);
  if (!v || *v == 0)
    throw UsageError(fmt::format("{}: '{}' is not a size such as 3K or 1M", flag, text));
  return *v;
}

/// "at 3072 B, cold: tier-mapped 1.2x tier-pread, 0.9x origin-pread; memory 0.01x".
void note_ratios(BenchReport& report, uint64_t row_bytes, const std::string& cache) {
  const auto mean = [&](const char* mode) -> std::optional<double> {
    const auto* cell =
        report.find({{"row_bytes", row_bytes}, {"cache", cache}, {"mode", std::string(mode)}});
    if (!cell) return std::nullopt;
    return cell->ns_per_row.mean();
  };
  const auto mapped = mean("tier-mapped");
  const auto pread = mean("tier-pread");
  const auto origin = mean("origin-pread");
  if (!mapped || !pread || !origin) return;
  std::string text = fmt::format(
      "ratio at {} B, {}: tier-mapped costs {:.2f}x a raw pread of the same tier file ({}: the "
      "goal is 2x), {:.2f}x an origin pread",
      row_bytes, cache, *mapped / *pread, *mapped <= 2 * *pread ? "within" : "OVER",
      *mapped / *origin);
  if (const auto memory = mean("memory"))
    text += fmt::format(", {:.1f}x memory", *mapped / *memory);
  report.note(text);
}

void run_bench_tier(const BenchTierOptions& opts, const CliContext& ctx) {
  opts.outputs.check();
  (void)ctx.resolve_settings();
  const uint64_t bytes = size_option(opts.bytes, "--bytes");
  std::vector<uint64_t> sizes;
  for (const auto& s : opts.row_bytes) sizes.push_back(size_option(s, "--row-bytes"));
  bool warm = false, cold = false;
  for (const auto& c : opts.caches) {
    if (c == "warm")
      warm = true;
    else if (c == "cold")
      cold = true;
    else
      throw UsageError("--cache: '" + c + "' is neither warm nor cold");
  }
  // The tier directory must be trusted as a serving rank's would be.
  StoreDescriptor::prepare_directory(opts.dir);
  const ScratchDir origin(opts.origin.empty() ? fs::path(opts.dir) : fs::path(opts.origin));

  BenchReport report("tier", "row");
  report.describe("tier", opts.dir);
  report.describe("origin",
                  opts.origin.empty() ? opts.dir + " (no --origin: the tier's disk)" : opts.origin);
  report.describe(
      "reads",
      fmt::format("{} random rows per cell, seed {}; cold: the file's pages dropped from the page "
                  "cache (and mapping) before each read",
                  opts.reads, opts.seed));
  for (uint64_t row_bytes : sizes) {
    const uint64_t rows = std::max<uint64_t>(1, bytes / row_bytes);
    Copies copies(origin.path(), opts.dir, row_bytes, rows, opts.seed);
    report.describe(fmt::format("load {} B rows", row_bytes),
                    fmt::format("{} rows ({}): memory {:.2f} s, tier file {:.2f} s (to disk)", rows,
                                human_bytes(static_cast<double>(rows * row_bytes)),
                                copies.memory_load_seconds, copies.tier_load_seconds));
    std::mt19937_64 rng(opts.seed + row_bytes);
    std::uniform_int_distribution<uint64_t> pick(0, rows - 1);
    std::vector<uint64_t> ids(opts.reads);
    for (auto& id : ids) id = pick(rng);
    // Warm cells first: a cold cell leaves the files' pages out of the cache, not in it.
    const auto modes = modes_of(copies, row_bytes);
    for (const auto& mode : modes) {
      if (warm) report.add(time_cell(copies, mode, false, row_bytes, ids));
    }
    for (const auto& mode : modes) {
      if (cold && mode.drop) report.add(time_cell(copies, mode, true, row_bytes, ids));
    }
    if (warm) note_ratios(report, row_bytes, "warm");
    if (cold) note_ratios(report, row_bytes, "cold");
  }
  report.print();
  for (const auto& cell : report.cells()) {
    if (cell.extra("mismatches").value_or(0) > 0)
      throw Error(ErrorKind::runtime, cell.label() + ": rows did not match the shard in memory");
  }
  report.write(opts.outputs);
}

}  // namespace

void setup_bench_tier(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchTierOptions>();
  auto* sub = bench.add_subcommand(
      "tier",
      "Rows from a node-local tier file (mapped) vs memory, a raw pread of it, and origin pread");
  sub->add_option("--dir", opts->dir,
                  "The tier directory (node-local NVMe), as given to serve --tier nvme:DIR")
      ->required();
  sub->add_option("--origin", opts->origin,
                  "Where the origin files go, e.g. the parallel file system (default: --dir)");
  sub->add_option("--row-bytes", opts->row_bytes, "Row sizes")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--bytes", opts->bytes, "Dataset bytes per row size")->capture_default_str();
  sub->add_option("--reads", opts->reads, "Random rows each cell reads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--cache", opts->caches,
                  "warm (page cache filled) and/or cold (pages dropped before each read)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--seed", opts->seed, "Seed for the random rows")->capture_default_str();
  add_bench_output_options(*sub, opts->outputs);
  sub->callback([opts, &ctx] { run_bench_tier(*opts, ctx); });
}

}  // namespace ddstage::cli
