// SpliceCopier: file-to-file copies into a shared-memory segment land byte for byte, across
// many pipe refills; a source that cannot splice is reported (the caller preads instead), and
// a source that ends early is an error after which the copier still works.
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "ddstage/error.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/splice_copier.hpp"
#include "test_support.hpp"

using namespace ddstage;
using Catch::Contains;

namespace {

/// Larger than any pipe (1 MiB at most unprivileged), and not a whole number of pages.
constexpr std::size_t source_bytes = (3u << 20) + 12345;

std::string segment_name() {
  return "/ddstage-test-" + std::to_string(::getpid()) + "-splice";
}

bool zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

TEST_CASE("a splice copy fills a shared-memory segment byte for byte", "[splice][load]") {
  test::TempDir dir;
  const auto source = test::pattern_bytes(source_bytes, 42);
  test::write_file(dir / "src.bin", source);
  const auto from = FileDescriptor::open(dir / "src.bin", O_RDONLY);
  auto shm = ShmSegment::create(segment_name(), source_bytes + 8192);
  const auto seg = shm.bytes();
  SpliceCopier copier;

  // The whole file at an unaligned offset, then a part of it over the start of the copy.
  REQUIRE(copier.copy(from, 0, shm.file(), 100, source_bytes));
  REQUIRE(std::equal(source.begin(), source.end(), seg.begin() + 100));
  CHECK(zero(seg.first(100)));
  CHECK(zero(seg.subspan(100 + source_bytes)));
  REQUIRE(copier.copy(from, 7, shm.file(), 0, 50));
  CHECK(std::equal(source.begin() + 7, source.begin() + 57, seg.begin()));
  CHECK(zero(seg.subspan(50, 50)));

  SECTION("a source that ends early is an error naming it; the copier still works after") {
    CHECK_THROWS_WITH(copier.copy(from, source_bytes - 10, shm.file(), 0, 20),
                      Contains("unexpected end of " + (dir / "src.bin").string()));
    REQUIRE(copier.copy(from, 1000, shm.file(), 0, 5000));
    CHECK(std::equal(source.begin() + 1000, source.begin() + 6000, seg.begin()));
  }
  SECTION("a source that cannot splice (a directory) is reported, nothing written") {
    const auto not_splicable = FileDescriptor::open(dir.path(), O_RDONLY | O_DIRECTORY);
    CHECK_FALSE(copier.copy(not_splicable, 0, shm.file(), 0, 4096));
    CHECK(std::equal(source.begin() + 7, source.begin() + 57, seg.begin()));
    REQUIRE(copier.copy(from, 0, shm.file(), 0, 4096));
    CHECK(std::equal(source.begin(), source.begin() + 4096, seg.begin()));
  }
}
