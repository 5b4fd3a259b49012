// Typed data between ranks: a struct that names its fields once reads back as written, nested
// optionals and lists included, and short bytes are an error rather than garbage.
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "error_record.hpp"
#include "mpi/wire_bytes.hpp"

using namespace ddstage;

namespace {

struct Region {
  uint64_t key = 0;
  uint64_t base = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.key, self.base);
  }
};

struct Shard {
  std::string segment;
  int64_t pid = 0;
  std::optional<Region> fabric;
  std::vector<std::string> hosts;
  double seconds = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.segment, self.pid, self.fabric, self.hosts, self.seconds);
  }
};

}  // namespace

TEST_CASE("a struct reads back as written", "[wire]") {
  const Shard with{
      "/ddstage-x-r1", -7, Region{42, 1u << 30}, {"node0", "", "node with spaces"}, 1.25};
  const auto back = detail::from_wire<Shard>(detail::to_wire(with));
  CHECK(back.segment == with.segment);
  CHECK(back.pid == -7);
  REQUIRE(back.fabric);
  CHECK(back.fabric->key == 42);
  CHECK(back.fabric->base == 1u << 30);
  CHECK(back.hosts == with.hosts);
  CHECK(back.seconds == 1.25);
  // The "- -" of before: no endpoint is an empty optional, not a word to compare.
  CHECK_FALSE(detail::from_wire<Shard>(detail::to_wire(Shard{"/s"})).fabric);
}

TEST_CASE("an error record crosses with its class", "[wire]") {
  const auto record = detail::ErrorRecord::of(StaleError("x.h5 changed"));
  const auto back = detail::from_wire<detail::ErrorRecord>(detail::to_wire(record));
  CHECK_THROWS_AS(back.raise(), StaleError);
  CHECK_THROWS_WITH(back.raise("rank 3: "), "rank 3: x.h5 changed");
}

TEST_CASE("short bytes are an error", "[wire]") {
  auto bytes = detail::to_wire(Shard{"/ddstage-x-r1", 1, Region{1, 2}, {"a"}, 0});
  bytes.resize(bytes.size() - 3);
  CHECK_THROWS_WITH(detail::from_wire<Shard>(bytes), Catch::Contains("truncated"));
}

TEST_CASE("a list count beyond the bytes left is truncated, not an allocation", "[wire]") {
  // A count of 2^62 strings followed by nothing: assigning first would throw length_error or
  // bad_alloc, or take the memory.
  auto bytes = detail::to_wire(uint64_t{1} << 62);
  CHECK_THROWS_WITH(detail::from_wire<std::vector<std::string>>(bytes),
                    Catch::Contains("truncated"));
}

TEST_CASE("a bool byte other than 0 or 1 is malformed", "[wire]") {
  auto bytes = detail::to_wire(std::optional<int32_t>(5));
  REQUIRE(bytes[0] == 1);
  bytes[0] = 7;
  CHECK_THROWS_WITH(detail::from_wire<std::optional<int32_t>>(bytes), Catch::Contains("malformed"));
}

TEST_CASE("an enum reads back through its underlying type", "[wire]") {
  const auto bytes = detail::to_wire(detail::ErrorClass::stale);
  CHECK(bytes.size() == 1);
  CHECK(detail::from_wire<detail::ErrorClass>(bytes) == detail::ErrorClass::stale);
}

TEST_CASE("bytes left over are a field-list mismatch", "[wire]") {
  // The writer sent a Shard; a reader expecting a Region reads 16 bytes and stops short.
  const auto bytes = detail::to_wire(Shard{"/ddstage-x-r1", 1, Region{1, 2}, {"a"}, 0});
  CHECK_THROWS_WITH(detail::from_wire<Region>(bytes), Catch::Contains("unread bytes"));
  CHECK_THROWS_WITH(detail::from_wire<Region>(detail::to_wire(Region{1, 2}) + "x"),
                    Catch::Contains("1 unread bytes"));
}
