// fill_shard with several streams: the same bytes as one stream, and the first error of any
// stream stops the load and names its cause.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "ddstage/error.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

constexpr uint64_t dataset_samples = 600;
constexpr uint64_t x_row_bytes = 40;
constexpr uint64_t x_files = 3;
constexpr uint64_t p_bytes = 16;
/// Chunks this small give every stream many turns, so their reads interleave.
constexpr uint64_t small_chunks = 1000;
/// Chunks of ~50 samples: a chunk's run of "g" rows is several pages long (long enough to be
/// written through a segment's file), and chunk boundaries still fall inside pages.
constexpr uint64_t page_run_chunks = 20000;

/// Three fields over six files: "x" fixed, its rows dealt round-robin over x0..x2.bin (only
/// every third sample is adjacent in a file); "g" variable, some rows empty, first half of the
/// samples in g0.bin and the rest in g1.bin; "p" fixed and packed into several pack files.
Index write_sharded_dataset(const test::TempDir& dir) {
  std::vector<std::vector<std::byte>> x(x_files), g(2);
  std::vector<std::vector<std::byte>> x_rows, g_rows;
  for (uint64_t i = 0; i < dataset_samples; ++i) {
    x_rows.push_back(test::pattern_bytes(x_row_bytes, 7 * i + 1));
    g_rows.push_back(test::pattern_bytes(test::varied_row_bytes(i), 7 * i + 2));
  }
  std::vector<uint64_t> x_at(dataset_samples), g_at(dataset_samples);
  for (uint64_t i = 0; i < dataset_samples; ++i) {
    auto& xf = x[i % x_files];
    x_at[i] = xf.size();
    xf.insert(xf.end(), x_rows[i].begin(), x_rows[i].end());
    auto& gf = g[i < dataset_samples / 2 ? 0 : 1];
    g_at[i] = gf.size();
    gf.insert(gf.end(), g_rows[i].begin(), g_rows[i].end());
  }
  for (uint64_t f = 0; f < x_files; ++f)
    test::write_file(dir / ("src/x" + std::to_string(f) + ".bin"), x[f]);
  for (int f = 0; f < 2; ++f) test::write_file(dir / ("src/g" + std::to_string(f) + ".bin"), g[f]);

  IndexWriter w({.out = dir / "d.ddx", .pack_bytes = 4096});
  w.set_format("test");
  w.define({{"x", DType::uint8, {x_row_bytes}, false, x_row_bytes, "x"},
            {"g", DType::uint8, {}, true, 0, "g"},
            {"p", DType::uint8, {p_bytes}, false, p_bytes, "p"}},
           dataset_samples);
  std::vector<uint32_t> x_ids, g_ids;
  for (uint64_t f = 0; f < x_files; ++f)
    x_ids.push_back(w.add_source(dir / ("src/x" + std::to_string(f) + ".bin")));
  for (int f = 0; f < 2; ++f)
    g_ids.push_back(w.add_source(dir / ("src/g" + std::to_string(f) + ".bin")));
  for (uint64_t i = 0; i < dataset_samples; ++i) {
    w.put_in_place(i, 0, x_ids[i % x_files], x_at[i], x_rows[i]);
    w.put_in_place(i, 1, g_ids[i < dataset_samples / 2 ? 0 : 1], g_at[i], g_rows[i]);
    w.put_packed(i, 2, test::pattern_bytes(p_bytes, 7 * i + 3));
  }
  w.commit();
  return Index::open(dir / "d.ddx");
}

std::vector<std::byte> fill(const Index& index, ShardRange range, const ShardLoadOptions& options) {
  ShardLayout layout(index, range);
  std::vector<std::byte> region(layout.total_bytes());
  fill_shard(index, layout, region, options);
  return region;
}

std::string segment_name(const char* what) {
  return "/ddstage-test-" + std::to_string(::getpid()) + "-" + what;
}

/// Flips one byte of path, keeping its size and mtime: only a checksum can notice.
void flip_byte_keep_mtime(const fs::path& path, std::streamoff at) {
  const auto mtime = fs::last_write_time(path);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get() ^ 0x5a);
  f.seekp(at);
  f.put(c);
  f.close();
  fs::last_write_time(path, mtime);
}

}  // namespace

TEST_CASE("several streams fill a shard byte for byte like one", "[shard][load]") {
  test::TempDir dir;
  const auto index = write_sharded_dataset(dir);
  const auto plan = ShardPlan::balance(index, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const auto one = fill(index, plan.range(rank), {.verify = true, .streams = 1});
    ShardView view(one, 3, plan.range(rank));
    const uint64_t s = plan.range(rank).first + 5;
    const auto x = view.row(s, 0);
    const auto expect = test::pattern_bytes(x_row_bytes, 7 * s + 1);
    REQUIRE(std::equal(x.begin(), x.end(), expect.begin(), expect.end()));
    for (unsigned streams : {2u, 3u, 8u}) {
      std::vector<uint64_t> seen;
      uint64_t total = 0;
      ShardLoadOptions options{.verify = true, .streams = streams, .chunk_bytes = small_chunks};
      options.progress = [&](uint64_t done, uint64_t all) {
        seen.push_back(done);
        total = all;
      };
      CHECK(fill(index, plan.range(rank), options) == one);
      REQUIRE(seen.size() > 1);
      CHECK(std::is_sorted(seen.begin(), seen.end()));
      CHECK(seen.back() == total);
    }
  }
}

TEST_CASE("a shard loaded into shared memory holds the bytes of one filled in memory",
          "[shard][load]") {
  // load_shard writes long runs adjacent in file and shard ("g") through the segment's file and
  // the rest ("x" from the scratch buffer, short runs) through its mapping; several streams
  // share pages between the two ways.
  test::TempDir dir;
  const auto index = write_sharded_dataset(dir);
  const auto plan = ShardPlan::balance(index, 2);
  const auto name = segment_name("shm");
  for (int rank = 0; rank < 2; ++rank) {
    const auto range = plan.range(rank);
    const auto expect = fill(index, range, {.verify = true, .streams = 1});
    for (unsigned streams : {1u, 3u}) {
      const auto shm = load_shard(
          index, range, name, {.verify = true, .streams = streams, .chunk_bytes = page_run_chunks});
      CHECK(std::equal(shm.bytes().begin(), shm.bytes().end(), expect.begin(), expect.end()));
    }
  }
  CHECK_FALSE(fs::exists("/dev/shm" + name));
}

/// This process's file pages mapped now (RssFile), in bytes.
uint64_t mapped_file_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  uint64_t kib = 0;
  while (status >> key) {
    if (key == "RssFile:" && status >> kib) return kib << 10;
  }
  FAIL("no RssFile in /proc/self/status");
  return 0;
}

TEST_CASE("a shard loaded into a tier file holds the same bytes, and leaves no page mapped",
          "[shard][load][tier]") {
  test::TempDir dir;
  const auto tier = dir / "tier";
  fs::create_directory(tier);
  const auto name = (tier / ("ddstage-test-" + std::to_string(::getpid()) + "-tier")).string();
  SECTION("every way of writing rows, verified") {
    const auto index = write_sharded_dataset(dir);
    const ShardRange all{0, dataset_samples};
    const auto expect = fill(index, all, {.verify = true, .streams = 1});
    const auto file = load_shard(index, all, name,
                                 {.verify = true, .streams = 3, .chunk_bytes = page_run_chunks});
    CHECK(std::equal(file.bytes().begin(), file.bytes().end(), expect.begin(), expect.end()));
  }
  SECTION("rows gathered through the mapping") {
    // Two fields interleaved row by row in one file: each run is read into the scratch buffer
    // and its rows copied into the mapping, page after page of the shard.
    constexpr uint64_t samples = 4096, row = 3000;
    std::vector<std::byte> bytes;
    for (uint64_t i = 0; i < 2 * samples; ++i) {
      const auto r = test::pattern_bytes(row, i);
      bytes.insert(bytes.end(), r.begin(), r.end());
    }
    test::write_file(dir / "rows.bin", bytes);
    IndexWriter w({.out = dir / "rows.ddx"});
    w.set_format("test");
    w.define(
        {{"a", DType::uint8, {row}, false, row, "a"}, {"b", DType::uint8, {row}, false, row, "b"}},
        samples);
    const auto file = w.add_source(dir / "rows.bin");
    for (uint64_t i = 0; i < 2 * samples; ++i)
      w.put_in_place(i / 2, i % 2, file, i * row, std::span(bytes).subspan(i * row, row));
    w.commit();
    const auto index = Index::open(dir / "rows.ddx");
    const uint64_t before = mapped_file_bytes();
    const auto loaded = load_shard(index, {0, samples}, name,
                                   {.verify = true, .streams = 2, .chunk_bytes = 1 << 20});
    // Without releasing each chunk, all of the shard's 23 MiB stayed mapped.
    CHECK(mapped_file_bytes() < before + (8 << 20));
    const ShardView view(loaded.bytes(), 2, {0, samples});
    for (uint64_t i : std::vector<uint64_t>{0, 1, 2 * samples - 1, samples + 7}) {
      const auto got = view.row(i / 2, i % 2);
      CHECK(std::equal(got.begin(), got.end(), bytes.begin() + i * row));
    }
  }
  CHECK_FALSE(fs::exists(name));
}

TEST_CASE("a failing stream stops the load, names the file, and leaves no segment",
          "[shard][load]") {
  test::TempDir dir;
  const auto index = write_sharded_dataset(dir);
  const ShardRange all{0, dataset_samples};
  const auto name = segment_name("loader");
  const ShardLoadOptions options{.verify = true, .streams = 4, .chunk_bytes = small_chunks};

  SECTION("a missing origin file") {
    fs::remove(dir / "src/x1.bin");
    CHECK_THROWS_WITH(load_shard(index, all, name, options), Contains("x1.bin"));
  }
  SECTION("an origin file that changed") {
    std::ofstream(dir / "src/g1.bin", std::ios::app) << "more";
    CHECK_THROWS_AS(load_shard(index, all, name, options), StaleError);
    CHECK_THROWS_WITH(load_shard(index, all, name, options), Contains("g1.bin"));
  }
  SECTION("a checksum mismatch, with verify") {
    flip_byte_keep_mtime(dir / "src/x2.bin", 3 * x_row_bytes + 1);  // sample 11's row
    CHECK_THROWS_AS(load_shard(index, all, name, options), ChecksumError);
    CHECK_THROWS_WITH(load_shard(index, all, name, options), Contains("x2.bin"));
    auto unverified = options;
    unverified.verify = false;
    CHECK_NOTHROW(load_shard(index, all, name, unverified));
  }
  CHECK_FALSE(fs::exists("/dev/shm" + name));
}

TEST_CASE("a streams count out of range is a usage error", "[shard][load]") {
  test::TempDir dir;
  const auto index = write_sharded_dataset(dir);
  for (unsigned streams : {0u, max_load_streams + 1}) {
    CHECK_THROWS_AS(fill(index, {0, dataset_samples}, {.streams = streams}), UsageError);
  }
  CHECK_NOTHROW(check_load_streams(max_load_streams));
}
