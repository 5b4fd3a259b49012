#include <catch2/catch.hpp>

#include "ddstage/error.hpp"
#include "ddstage/tool/id_spec.hpp"
#include "test_support.hpp"

using ddstage::parse_ids;
using ddstage::UsageError;

TEST_CASE("ids and ranges keep order and repeats", "[ids]") {
  CHECK(parse_ids("0,7,10-12", 100) == std::vector<uint64_t>{0, 7, 10, 11, 12});
  CHECK(parse_ids("5,5,1", 6) == std::vector<uint64_t>{5, 5, 1});
  CHECK(parse_ids(" 3 - 4 ", 6) == std::vector<uint64_t>{3, 4});
}

TEST_CASE("malformed or out-of-range ids are usage errors naming the token", "[ids]") {
  CHECK_THROWS_WITH(parse_ids("1,x", 10), Catch::Contains("bad id 'x'"));
  CHECK_THROWS_WITH(parse_ids("1,,2", 10), Catch::Contains("bad id ''"));
  CHECK_THROWS_WITH(parse_ids("-3", 10), Catch::Contains("bad id"));
  CHECK_THROWS_WITH(parse_ids("9-3", 10), Catch::Contains("end before start"));
  CHECK_THROWS_WITH(parse_ids("10", 10), Catch::Contains("out of range") && Catch::Contains("0-9"));
  CHECK_THROWS_WITH(parse_ids("5-10", 10), Catch::Contains("out of range"));
  CHECK_THROWS_AS(parse_ids("18446744073709551616", 10), UsageError);
}

TEST_CASE("@FILE holds one id or range per line", "[ids]") {
  ddstage::test::TempDir dir;
  std::ofstream(dir / "ids.txt") << "# batch\n4\n\n2-3\n4\n";
  CHECK(parse_ids("@" + (dir / "ids.txt").string(), 10) == std::vector<uint64_t>{4, 2, 3, 4});
  std::ofstream(dir / "bad.txt") << "1\nfoo\n";
  CHECK_THROWS_WITH(parse_ids("@" + (dir / "bad.txt").string(), 10), Catch::Contains("bad.txt:2"));
  CHECK_THROWS_WITH(parse_ids("@" + (dir / "none.txt").string(), 10),
                    Catch::Contains("cannot read"));
}

TEST_CASE("a bad item is named by its position, in one line whatever the spec holds", "[ids]") {
  // Found by fuzz_id_spec: a newline in the spec made a two-line error.
  CHECK_THROWS_WITH(parse_ids("4\n0,7,10-", 100), Catch::Contains("bad id '4?0'") &&
                                                      Catch::Contains("--ids item 1") &&
                                                      !Catch::Contains("\n"));
  CHECK_THROWS_WITH(parse_ids("1,2,9\x1b[2J", 100),
                    Catch::Contains("'9?[2J'") && Catch::Contains("item 3"));
  CHECK_THROWS_WITH(parse_ids("1,9-\t", 100), Catch::Contains("item 2"));
}

TEST_CASE("a long spec is not echoed whole in its error", "[ids]") {
  std::string spec;
  for (int i = 0; i < 100000; ++i) spec += std::to_string(i % 1000) + ",";
  spec += "x";
  try {
    parse_ids(spec, 1000);
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).size() < 200);
    CHECK_THAT(e.what(), Catch::Contains("bad id 'x' in --ids item 100001"));
  }
  const std::string long_token(1000, '7');
  CHECK_THROWS_WITH(parse_ids(long_token, 10),
                    Catch::Contains("'" + std::string(64, '7') + "...'"));
}

TEST_CASE("an id of a dataset with no samples says so", "[ids]") {
  CHECK_THROWS_WITH(parse_ids("0", 0), Catch::Contains("the dataset has no samples") &&
                                           !Catch::Contains("1844674407"));
}
