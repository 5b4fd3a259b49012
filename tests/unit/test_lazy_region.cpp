// Lazy first-touch staging, the owner's side: staged rows are origin's bytes, each sample is
// read from origin once whoever asks (concurrent stages, a racing prefetch), a source changed
// meanwhile is refused and stages nothing, and a reader asking over the control socket gets
// the owner's answer or its error.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "control/control_server.hpp"
#include "control/stage_messages.hpp"
#include "control/stage_workers.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "lazy_region.hpp"
#include "server/lazy_regions.hpp"
#include "test_support.hpp"

using namespace ddstage;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

constexpr uint64_t n = 600;
constexpr uint64_t a_bytes = 40;  // 5 rows per 200-byte checksum block
constexpr uint64_t b_bytes = 64;  // 3 rows per block: with a's, units of 15 samples
/// Not on a unit's edge at either end: the first and last units are cut short, and verifying
/// them reads rows outside the range.
constexpr ShardRange range{101, 457};

/// "a" and "b" fixed, each one contiguous array in its own file, checksummed in blocks of 5
/// and 3 rows; "g" variable (some rows empty), every row its own block.
Index write_dataset(const test::TempDir& dir) {
  const auto a = test::pattern_bytes(n * a_bytes, 1);
  const auto b = test::pattern_bytes(n * b_bytes, 2);
  const auto g = test::variable_rows(n, test::varied_row_bytes);
  test::write_file(dir / "src/a.bin", a);
  test::write_file(dir / "src/b.bin", b);
  test::write_file(dir / "src/g.bin", g.bytes);
  IndexWriter w({.out = dir / "d.ddx", .block_bytes = 200});
  w.set_format("test");
  w.define({{"a", DType::uint8, {a_bytes}, false, a_bytes, "a"},
            {"b", DType::uint8, {b_bytes}, false, b_bytes, "b"},
            {"g", DType::uint8, {}, true, 0, "g"}},
           n);
  const uint32_t a_file = w.add_source(dir / "src/a.bin");
  const uint32_t b_file = w.add_source(dir / "src/b.bin");
  const uint32_t g_file = w.add_source(dir / "src/g.bin");
  w.put_rows_in_place(0, 0, n, a_file, 0, a_bytes, a_bytes, a);
  w.put_rows_in_place(1, 0, n, b_file, 0, b_bytes, b_bytes, b);
  for (uint64_t i = 0; i < n; ++i)
    w.put_in_place(i, 2, g_file, g.at[i],
                   std::span(g.bytes).subspan(g.at[i], test::varied_row_bytes(i)));
  w.commit();
  return Index::open(dir / "d.ddx");
}

/// The range loaded whole, as `load` does.
std::vector<std::byte> loaded(const Index& index) {
  ShardLayout layout(index, range);
  std::vector<std::byte> region(layout.total_bytes());
  fill_shard(index, layout, region, {.verify = true});
  return region;
}

/// A region and the lazy owner of it.
struct Lazy {
  Lazy(const Index& index, LazyRegionOptions options = {})
      : bytes(ShardLayout(index, range).total_bytes()),
        region(index, ShardLayout(index, range), bytes, options) {}
  std::vector<std::byte> bytes;
  LazyRegion region;
};

/// Every sample of the range, in order.
std::vector<uint64_t> all_ids() {
  std::vector<uint64_t> all;
  for (uint64_t s = range.first; s < range.last; ++s) all.push_back(s);
  return all;
}

/// The whole range is staged, each sample read from origin once, and the region is byte for
/// byte what a load makes.
void require_loaded_once(const Index& index, const Lazy& lazy) {
  REQUIRE(lazy.region.complete());
  CHECK(lazy.region.origin_reads() == range.count());
  REQUIRE(lazy.bytes == loaded(index));
}

/// Every field of ids in the lazy region is origin's.
void require_origin_rows(const Index& index, const std::vector<std::byte>& region,
                         const std::vector<uint64_t>& ids) {
  ShardView view(region, 3, range);
  OriginReader origin(index);
  for (uint32_t f = 0; f < 3; ++f) {
    std::vector<std::byte> expect(origin.batch_bytes(f, ids));
    origin.read(f, ids, expect);
    std::vector<std::byte> got;
    for (uint64_t id : ids) {
      const auto row = view.row(id, f);
      got.insert(got.end(), row.begin(), row.end());
    }
    REQUIRE(got == expect);
  }
}

/// Moves path's mtime by a second: the index then calls it stale, its bytes unchanged.
void touch(const fs::path& path, std::chrono::seconds by = 1s) {
  fs::last_write_time(path, fs::last_write_time(path) + by);
}

/// A rank's control socket as the owner of region "/r1" of dataset "d" runs it: every request goes
/// to its stage workers.
class OwnerDesk {
 public:
  OwnerDesk(LazyRegion& region, detail::StageWorkersOptions options)
      : m_workers(
            [&region](const std::string& dataset,
                      const std::string& segment) -> std::shared_ptr<LazyRegion> {
              if (dataset != "d" || segment != "/r1") return nullptr;
              return {std::shared_ptr<LazyRegion>(), &region};  // the test owns it
            },
            options),
        m_desk([this](const std::stop_token& stop) {
          while (!stop.stop_requested()) {
            if (auto request = m_server.next(50ms)) {
              m_workers.submit(std::move(*request));
              m_server.done();
            }
          }
        }) {}

  detail::StageReply stage(const std::string& segment, std::span<const uint64_t> ids) {
    return detail::request_stage(m_server.address(), token, "d", segment, ids, 10s);
  }

 private:
  static constexpr const char* token = "0123456789abcdef0123456789abcdef";
  detail::ControlServer m_server{"127.0.0.1:0", token, nullptr};
  detail::StageWorkers m_workers;
  std::jthread m_desk;  // last: stops first
};

}  // namespace

TEST_CASE("a lazy region stages whole checksum blocks with origin's bytes", "[lazy]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  const bool verify = GENERATE(false, true);
  Lazy lazy(index, {.verify = verify});
  auto& region = lazy.region;
  CHECK(region.staged() == 0);

  region.stage(std::vector<uint64_t>{110});
  CHECK(region.staged() == 15);  // [105, 120): a's blocks and b's line up every 15 samples
  region.stage(std::vector<uint64_t>{101});
  CHECK(region.staged() == 15 + 4);  // [90, 105), cut at the range's first sample
  region.stage(std::vector<uint64_t>{456, 120, 119, 456});
  CHECK(region.staged() == 15 + 4 + 7 + 15);  // [450, 457) and [120, 135)
  CHECK(region.origin_reads() == region.staged());
  require_origin_rows(index, lazy.bytes, {101, 104, 105, 110, 119, 120, 134, 450, 456});

  region.stage(std::vector<uint64_t>{110, 101, 456});
  CHECK(region.origin_reads() == 15 + 4 + 7 + 15);  // staged ones are not read again
  CHECK_THROWS_AS(region.stage(std::vector<uint64_t>{100}), UsageError);
  CHECK_THROWS_AS(region.stage(std::vector<uint64_t>{457}), UsageError);

  auto all = all_ids();
  std::shuffle(all.begin(), all.end(), std::mt19937_64(17));
  for (std::size_t i = 0; i < all.size(); i += 40)
    region.stage(std::span(all).subspan(i, std::min<std::size_t>(40, all.size() - i)));
  require_loaded_once(index, lazy);
}

TEST_CASE("concurrent stages and a prefetch read each sample from origin once", "[lazy]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  Lazy lazy(index, {.prefetch_chunk_bytes = 0});  // a unit a chunk: the finest interleaving
  auto& region = lazy.region;
  region.start_prefetch();
  std::vector<std::jthread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&region, t] {
      std::mt19937_64 random(t);
      std::uniform_int_distribution<uint64_t> id(range.first, range.last - 1);
      for (int batch = 0; batch < 20; ++batch) {
        std::vector<uint64_t> ids(16);
        for (auto& i : ids) i = id(random);
        region.stage(ids);
      }
    });
  }
  readers.clear();
  region.wait_prefetch();
  require_loaded_once(index, lazy);
}

TEST_CASE("a source changed during a lazy load is refused and stages nothing", "[lazy]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  Lazy lazy(index);
  auto& region = lazy.region;
  region.stage(std::vector<uint64_t>{110});
  REQUIRE(region.staged() == 15);

  touch(dir / "src/b.bin");
  CHECK_THROWS_WITH(region.stage(std::vector<uint64_t>{200, 300}), Contains("b.bin"));
  CHECK_THROWS_AS(region.stage(std::vector<uint64_t>{200}), StaleError);
  CHECK(region.staged() == 15);
  CHECK(region.origin_reads() == 15);
  region.stage(std::vector<uint64_t>{110});  // what is in stays readable

  region.start_prefetch();
  CHECK_THROWS_AS(region.wait_prefetch(), StaleError);
  CHECK(region.staged() == 15);

  // Claims that failed were released: once the file is as flattened, the same ids stage.
  touch(dir / "src/b.bin", -1s);
  region.stage(std::vector<uint64_t>{200, 300});
  CHECK(region.staged() == 15 * 3);

  SECTION("unless stale sources are allowed") {
    touch(dir / "src/b.bin");
    Lazy stale(index, {.allow_stale = true});
    stale.region.stage(std::vector<uint64_t>{200});
    CHECK(stale.region.staged() == 15);
  }
}

TEST_CASE("a lazy region that verifies stages no block whose checksum fails", "[lazy]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  const auto path = dir / "src/a.bin";
  {  // one byte of sample 112's "a" row, size and mtime kept
    const auto mtime = fs::last_write_time(path);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(112 * a_bytes + 3);
    f.put('\x5a');
    f.close();
    fs::last_write_time(path, mtime);
  }
  Lazy lazy(index, {.verify = true});
  auto& region = lazy.region;
  CHECK_THROWS_AS(region.stage(std::vector<uint64_t>{108}), ChecksumError);
  CHECK(region.staged() == 0);
  CHECK(region.origin_reads() == 15);  // read, found wrong, not staged
  region.stage(std::vector<uint64_t>{120});
  CHECK(region.staged() == 15);
}

TEST_CASE("readers stage through the owner's control socket", "[lazy][control]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  Lazy lazy(index);
  const std::size_t max_queued = GENERATE(0, 64);
  OwnerDesk owner(lazy.region, {.threads = 2, .max_queued = max_queued});
  const std::vector<uint64_t> ids{110, 300, 301};
  if (max_queued == 0) {
    CHECK_THROWS_WITH(owner.stage("/r1", ids), Contains("0 stage requests waiting"));
    CHECK(lazy.region.staged() == 0);
    return;
  }

  auto reply = owner.stage("/r1", ids);
  CHECK(reply.staged == 30);
  CHECK(reply.origin_reads == 30);
  CHECK_FALSE(reply.complete);
  require_origin_rows(index, lazy.bytes, ids);

  CHECK_THROWS_WITH(owner.stage("/r2", ids), Contains("no region /r2 of dataset 'd'"));
  CHECK_THROWS_AS(owner.stage("/r1", std::vector<uint64_t>{457}), UsageError);
  touch(dir / "src/g.bin");
  CHECK_THROWS_WITH(owner.stage("/r1", std::vector<uint64_t>{200}), Contains("g.bin"));
  CHECK_THROWS_AS(owner.stage("/r1", std::vector<uint64_t>{200}), StaleError);
  touch(dir / "src/g.bin", -1s);

  std::vector<std::jthread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&owner, t] {
      auto all = all_ids();
      std::shuffle(all.begin(), all.end(), std::mt19937_64(t));
      for (std::size_t i = 0; i < all.size(); i += 100)
        owner.stage("/r1", std::span(all).subspan(i, std::min<std::size_t>(100, all.size() - i)));
    });
  }
  readers.clear();
  reply = owner.stage("/r1", {});
  CHECK(reply.complete);
  CHECK(reply.origin_reads == range.count());
  require_loaded_once(index, lazy);
}

TEST_CASE("a rank's lazy region outlives its entry while a stage request holds it", "[lazy]") {
  test::TempDir dir;
  const auto index = write_dataset(dir);
  const ShardLayout layout(index, range);
  const std::string name = "/ddstage-test-" + std::to_string(::getpid()) + "-lazy-entry";
  detail::LazyRegions regions;
  auto entry = std::make_optional<detail::LazyRegions::Entry>(
      regions, "d", ShmSegment::create(name, layout.total_bytes()), Index::open(dir / "d.ddx"),
      layout, LazyRegionOptions{});
  CHECK(regions.find("other", name) == nullptr);
  auto held = regions.find("d", name);  // a stage request in flight
  REQUIRE(held);
  entry.reset();  // an unload: it returns at once, nothing unmapped under the request
  CHECK(regions.find("d", name) == nullptr);
  CHECK(ShmSegment::try_open_read_only(name).has_value());
  held->stage(std::vector<uint64_t>{200, 300});
  require_origin_rows(index,
                      [&] {
                        const auto open = ShmSegment::open_read_only(name);
                        return std::vector<std::byte>(open.bytes().begin(), open.bytes().end());
                      }(),
                      {200, 300});
  held.reset();  // the request done: the segment goes with it
  CHECK_FALSE(ShmSegment::try_open_read_only(name).has_value());
}
