// The node-local tier: --tier specs, placing regions on tiers within their limits, and tier
// files as segments (created, mapped, refused when they are not the user's own).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "ddstage/error.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/tier_set.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

/// A uid that is not this process's: files given to it test the owner checks (root only).
constexpr uid_t other_uid = 4242;

std::vector<std::byte> bytes_of(std::span<const std::byte> s) {
  return {s.begin(), s.end()};
}

}  // namespace

TEST_CASE("a --tier spec lists tiers in order, and a bad one names its part", "[tier]") {
  const auto memory_only = parse_tier_spec("memory");
  REQUIRE(memory_only.size() == 1);
  CHECK(memory_only[0].kind == TierSpec::Kind::memory);
  CHECK(memory_only[0].name() == "memory");

  const auto tiers = parse_tier_spec("memory,nvme:/local/a/,nvme:/local/b:500G");
  REQUIRE(tiers.size() == 3);
  CHECK(tiers[1].kind == TierSpec::Kind::nvme);
  CHECK(tiers[1].dir == "/local/a");
  CHECK(tiers[1].limit == 0);
  CHECK(tiers[1].name() == "nvme:/local/a");
  CHECK(tiers[1].label() == "nvme");
  CHECK(tiers[2].dir == "/local/b");
  CHECK(tiers[2].limit == 500ull << 30);
  CHECK(parse_tier_spec("nvme:/x").front().kind == TierSpec::Kind::nvme);
  CHECK(parse_tier_spec(" memory , nvme:/x ").size() == 2);

  for (const auto& [spec, part, why] :
       std::vector<std::array<std::string, 3>>{{"", "''", "empty"},
                                               {"memory,,nvme:/a", "''", "empty"},
                                               {"memory,disk:/a", "'disk:/a'", "unknown kind"},
                                               {"nvme:scratch", "'nvme:scratch'", "absolute"},
                                               {"nvme:/", "'nvme:/'", "root directory"},
                                               {"nvme:/a,memory", "'memory'", "first"},
                                               {"nvme:/a,nvme:/a/", "'nvme:/a/'", "twice"},
                                               {"nvme:/a:0", "'nvme:/a:0'", "more than 0"},
                                               {"nvme:/a:12Q", "'nvme:/a:12Q'", "not a size"}}) {
    INFO(spec);
    CHECK_THROWS_AS(parse_tier_spec(spec), UsageError);
    CHECK_THROWS_WITH(parse_tier_spec(spec), Contains("bad tier " + part) && Contains(why));
  }
}

TEST_CASE("regions go to memory while they fit, then to the first tier with room", "[tier]") {
  test::TempDir dir;
  const auto nvme = dir / "nvme";  // made by the TierSet
  TierSet tiers({{}, {.kind = TierSpec::Kind::nvme, .dir = nvme, .limit = 100 << 10}}, 64 << 10);
  CHECK((fs::status(nvme).permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK(tiers.names() == std::vector<std::string>{"memory", "nvme:" + nvme.string()});
  CHECK(tiers.directories() == std::vector<fs::path>{nvme});

  auto a = tiers.allocate("/ddstage-0123456789ab-a-g1-r0", 40 << 10);
  CHECK(a.segment() == "/ddstage-0123456789ab-a-g1-r0");
  CHECK(a.label() == "memory");
  auto b = tiers.allocate("ddstage-0123456789ab-b-g2-r0", 40 << 10);
  CHECK(b.segment() == (nvme / "ddstage-0123456789ab-b-g2-r0").string());
  CHECK(b.label() == "nvme");
  CHECK(b.tier_name() == "nvme:" + nvme.string());
  auto usage = tiers.bytes_by_tier();
  REQUIRE(usage.size() == 2);
  CHECK(usage[0].used == 40 << 10);
  CHECK(usage[0].limit == 64 << 10);
  CHECK(usage[1].used == 40 << 10);
  CHECK(usage[1].limit == 100 << 10);

  // Neither has 70 KiB left: the error says what each has.
  CHECK_THROWS_AS(tiers.allocate("c", 70 << 10, {.what = "dataset 'c' on rank 0"}), UsageError);
  CHECK_THROWS_WITH(tiers.allocate("c", 70 << 10, {.what = "dataset 'c' on rank 0"}),
                    Contains("dataset 'c' on rank 0 does not fit: it needs 70.0 KiB") &&
                        Contains("memory 24.0 KiB free of 64.0 KiB") &&
                        Contains("nvme:" + nvme.string() + " 60.0 KiB free of 100.0 KiB"));
  // A region being replaced counts as free where it is.
  auto a2 = tiers.allocate("a2", 60 << 10, {.replacing = &a});
  CHECK(a2.label() == "memory");
  a = std::move(a2);  // the old one goes: its bytes come back
  CHECK(tiers.bytes_by_tier()[0].used == 60 << 10);
  {
    auto moved = std::move(b);
    CHECK(tiers.bytes_by_tier()[1].used == 40 << 10);
  }
  CHECK(tiers.bytes_by_tier()[1].used == 0);
  CHECK(tiers.allocate("d", 100 << 10).label() == "nvme");
  // A load's own memory bound (load --mem-limit) replaces the set's for that allocation.
  CHECK(tiers.allocate("f", 1 << 10, {.mem_limit = 60 << 10}).label() == "nvme");
  CHECK(tiers.allocate("g", 1 << 10, {.mem_limit = 61 << 10}).label() == "memory");

  // Without a limit, an nvme tier holds what its file system has free.
  TierSet unbounded({{.kind = TierSpec::Kind::nvme, .dir = nvme}}, 0);
  CHECK(unbounded.allocate("e", 1 << 20).label() == "nvme");
  CHECK_THROWS_WITH(unbounded.allocate("e", 1ull << 62), Contains("does not fit"));
}

TEST_CASE("a tier directory others can write is refused", "[tier]") {
  test::TempDir dir;
  fs::create_directories(dir / "shared");
  fs::permissions(dir / "shared", fs::perms::group_write, fs::perm_options::add);
  const std::vector<TierSpec> spec{{.kind = TierSpec::Kind::nvme, .dir = dir / "shared"}};
  CHECK_THROWS_AS(TierSet(spec, 0), UsageError);
  const auto name = (dir / "shared" / "ddstage-0123456789ab-x-g1-r0").string();
  CHECK_THROWS_WITH(ShmSegment::create(name, 4096),
                    Contains("tier directory") && Contains("writable by others"));
  fs::permissions(dir / "shared", fs::perms::group_write, fs::perm_options::remove);
  auto created = ShmSegment::create(name, 4096);
  fs::permissions(dir / "shared", fs::perms::others_write, fs::perm_options::add);
  CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Contains("writable by others"));
}

TEST_CASE("a segment named by a path is a file in its directory, mapped like shared memory",
          "[tier][shm]") {
  test::TempDir dir;
  const auto name = (dir / "ddstage-0123456789ab-x-g1-r0").string();
  CHECK(ShmSegment::is_file(name));
  CHECK_FALSE(ShmSegment::is_file("/ddstage-0123456789ab-x-g1-r0"));
  CHECK_FALSE(ShmSegment::try_open_read_only(name));
  CHECK_FALSE(ShmSegment::try_open_read_only((dir / "gone/ddstage-x").string()));

  const auto pattern = test::pattern_bytes(3 * 4096 + 100, 7);
  {
    auto seg = ShmSegment::create(name, pattern.size());
    CHECK((fs::status(name).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
    seg.file().pwrite_all(std::span(pattern).first(5000), 0);
    std::copy(pattern.begin() + 5000, pattern.end(), seg.writable().begin() + 5000);
    CHECK_THROWS_AS(ShmSegment::create(name, 4096), IoError);  // never reuses a name

    auto reader = ShmSegment::open_read_only(name);
    CHECK(bytes_of(reader.bytes()) == pattern);
    CHECK_FALSE(reader.unlinked());
    seg.unlink();
    CHECK(reader.unlinked());
    CHECK(bytes_of(reader.bytes()) == pattern);  // a reader's mapping outlives the name
    CHECK_FALSE(fs::exists(name));
  }
  { auto seg = ShmSegment::create(name, 4096); }
  CHECK_FALSE(fs::exists(name));  // the creator removes it
  auto left = ShmSegment::create(name, 4096);
  CHECK(ShmSegment::remove(name));  // what a rank's way out does
  CHECK_FALSE(fs::exists(name));
  CHECK_FALSE(ShmSegment::remove(name));
}

TEST_CASE("a tier file is refused when it is a link, not a file, or not the user's own",
          "[tier][shm]") {
  test::TempDir dir;
  const auto target = dir / "target";
  const auto name = (dir / "ddstage-0123456789ab-x-g1-r0").string();
  SECTION("a symbolic link") {
    test::write_file(target, test::pattern_bytes(4096, 1));
    fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write);
    fs::create_symlink(target, name);
    CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Contains("symbolic link"));
    CHECK_THROWS_AS(ShmSegment::create(name, 4096), IoError);  // neither followed nor replaced
    CHECK(fs::is_symlink(name));
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo(name.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Contains("not a regular file"));
  }
  SECTION("readable by others") {
    test::write_file(name, test::pattern_bytes(4096, 1));
    fs::permissions(name, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
    CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Contains("mode 0604"));
  }
  if (::geteuid() == 0) {
    SECTION("owned by another user") {
      test::write_file(name, test::pattern_bytes(4096, 1));
      fs::permissions(name, fs::perms::owner_read | fs::perms::owner_write);
      REQUIRE(::chown(name.c_str(), other_uid, other_uid) == 0);
      CHECK_THROWS_WITH(ShmSegment::open_read_only(name), Contains("owned by uid 4242"));
    }
    SECTION("in a directory of another user") {
      REQUIRE(::chown(dir.path().c_str(), other_uid, other_uid) == 0);
      CHECK_THROWS_WITH(ShmSegment::create(name, 4096),
                        Contains("owned by uid 4242") && Contains("directory of your own"));
      REQUIRE(::chown(dir.path().c_str(), 0, 0) == 0);
    }
  }
}
