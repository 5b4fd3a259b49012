// ShardPlan balance and lookup, the shard region layout, and shared-memory segments.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "ddstage/error.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;

namespace {

/// A files dataset of n samples, sample i holding (i * 37) % 500 + 1 bytes.
Index variable_dataset(const test::TempDir& dir, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "src/%05llu.bin", static_cast<unsigned long long>(i));
    test::write_file(dir / name, test::pattern_bytes((i * 37) % 500 + 1, i));
  }
  return test::flatten_to(dir / "v.ddx", test::request_for({dir / "src"}));
}

uint64_t range_bytes(const Index& index, ShardRange r) {
  uint64_t bytes = 0;
  for (uint64_t s = r.first; s < r.last; ++s) bytes += index.entry(s, 0).length;
  return bytes;
}

std::string unique_shm_name(const char* what) {
  return "/ddstage-test-" + std::to_string(::getpid()) + "-" + what;
}

}  // namespace

TEST_CASE("shard plans cover every sample once, balanced by bytes", "[shard]") {
  test::TempDir dir;
  auto index = variable_dataset(dir, 300);
  for (int ranks : {1, 2, 3, 7}) {
    auto plan = ShardPlan::balance(index, ranks);
    REQUIRE(plan.ranks() == ranks);
    CHECK(plan.range(0).first == 0);
    CHECK(plan.range(ranks - 1).last == 300);
    const double ideal = static_cast<double>(index.manifest().total_bytes) / ranks;
    for (int r = 0; r < ranks; ++r) {
      if (r > 0) CHECK(plan.range(r).first == plan.range(r - 1).last);
      // Contiguous ranges can miss the ideal split by at most one sample (<= 500 bytes).
      CHECK(std::abs(static_cast<double>(range_bytes(index, plan.range(r))) - ideal) <= 500.0);
      for (uint64_t s = plan.range(r).first; s < plan.range(r).last; ++s)
        REQUIRE(plan.owner(s) == r);
    }
    CHECK(ShardPlan::balance(index, ranks).boundaries() == plan.boundaries());  // deterministic
  }
}

TEST_CASE("more ranks than samples leaves some ranks empty", "[shard]") {
  test::TempDir dir;
  auto index = variable_dataset(dir, 3);
  auto plan = ShardPlan::balance(index, 8);
  uint64_t covered = 0;
  for (int r = 0; r < 8; ++r) covered += plan.range(r).count();
  CHECK(covered == 3);
  for (uint64_t s = 0; s < 3; ++s) CHECK(plan.range(plan.owner(s)).first <= s);
  CHECK_THROWS_AS(ShardPlan::balance(index, 0), UsageError);
  CHECK_THROWS_AS(ShardPlan::from_boundaries({0, 5, 3}), UsageError);
  CHECK(ShardPlan::from_boundaries(plan.boundaries()).owner(2) == plan.owner(2));
}

TEST_CASE("a shard region holds every row of its range where the view finds it", "[shard]") {
  test::TempDir dir;
  auto index = variable_dataset(dir, 50);
  auto plan = ShardPlan::balance(index, 3);
  OriginReader reader(index, {.verify = true});
  for (int r = 0; r < 3; ++r) {
    ShardLayout layout(index, plan.range(r));
    std::vector<std::byte> region(layout.total_bytes());
    layout.write_tables(region);
    std::vector<EntryRead> reads;
    for (uint64_t s = plan.range(r).first; s < plan.range(r).last; ++s) {
      reads.push_back({s, 0, region.data() + layout.row_offset(s, 0)});
    }
    reader.read_entries(reads);
    ShardView view(region, 1, plan.range(r));
    for (uint64_t s = plan.range(r).first; s < plan.range(r).last; ++s) {
      auto row = view.row(s, 0);
      auto expect = test::pattern_bytes((s * 37) % 500 + 1, s);
      REQUIRE(std::equal(row.begin(), row.end(), expect.begin(), expect.end()));
    }
    CHECK_THROWS_AS(ShardView(region, 2, plan.range(r)), IndexError);
    CHECK_THROWS_AS(ShardView(std::span(region).first(8), 1, plan.range(r)), IndexError);
  }
}

TEST_CASE("shared-memory segments: exclusive create, read-only open, unlink by the owner",
          "[shm]") {
  const auto name = unique_shm_name("seg");
  {
    auto seg = ShmSegment::create(name, 4096);
    seg.writable()[10] = std::byte{42};
    CHECK_THROWS_AS(ShmSegment::create(name, 4096), IoError);
    auto reader = ShmSegment::open_read_only(name);
    REQUIRE(reader.bytes().size() == 4096);
    CHECK(reader.bytes()[10] == std::byte{42});
    CHECK(fs::exists("/dev/shm" + name));
    const auto mode = fs::status("/dev/shm" + name).permissions() & fs::perms::all;
    CHECK(mode == (fs::perms::owner_read | fs::perms::owner_write));
  }
  CHECK_FALSE(fs::exists("/dev/shm" + name));
  CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Catch::Contains(name));
}
