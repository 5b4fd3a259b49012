// Placement: copies over hosts (load --replicas), repairs, coverage, and the per-sample lookup
// readers fail over with.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "ddstage/tool/placement.hpp"
#include "test_support.hpp"

using namespace ddstage;

namespace {

/// A files dataset of n samples of 100 bytes each.
Index even_dataset(const test::TempDir& dir, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "src/%05llu.bin", static_cast<unsigned long long>(i));
    test::write_file(dir / name, test::pattern_bytes(100, i));
  }
  return test::flatten_to(dir / "e.ddx", test::request_for({dir / "src"}));
}

/// For every sample: the set of ranks holding it.
std::vector<std::multiset<int>> holders_by_sample(const std::vector<PlacedRange>& regions,
                                                  uint64_t samples) {
  std::vector<std::multiset<int>> out(samples);
  for (const auto& g : regions)
    for (uint64_t s = g.first; s < g.last; ++s) out[s].insert(g.rank);
  return out;
}

std::vector<bool> live_but(std::size_t ranks, std::set<int> lost) {
  std::vector<bool> live(ranks, true);
  for (int r : lost) live[static_cast<std::size_t>(r)] = false;
  return live;
}

std::vector<std::string> hosts_without(std::vector<std::string> hosts, std::set<int> lost) {
  for (int r : lost) hosts[static_cast<std::size_t>(r)].clear();
  return hosts;
}

}  // namespace

TEST_CASE("copies lie on distinct ranks of distinct hosts, every rank holding its share",
          "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 60);
  const std::vector<std::string> hosts{"a", "a", "b", "b", "c", "c"};
  std::string warning;
  const auto regions = plan_copies(index, hosts, 2, &warning);
  CHECK(warning.empty());
  std::map<int, uint64_t> held;
  const auto by_sample = holders_by_sample(regions, 60);
  for (uint64_t sample = 0; sample < 60; ++sample) {
    INFO("sample " << sample);
    const auto& ranks = by_sample[sample];
    REQUIRE(ranks.size() == 2);
    const int a = *ranks.begin();
    const int b = *std::next(ranks.begin());
    CHECK(hosts[static_cast<std::size_t>(a)] != hosts[static_cast<std::size_t>(b)]);
    ++held[a];
    ++held[b];
  }
  // Chained copies: 6 ranks, 2 copies of 60 samples: 20 each.
  REQUIRE(held.size() == 6);
  for (const auto& [rank, count] : held) CHECK(count == 20);
}

TEST_CASE("copies on fewer hosts than copies say so; too few ranks is refused", "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 12);
  std::string warning;
  const auto regions = plan_copies(index, std::vector<std::string>{"a", "a", "a"}, 2, &warning);
  CHECK(warning.find("a node's loss can cost more than one copy") != std::string::npos);
  for (const auto& ranks : holders_by_sample(regions, 12)) {
    REQUIRE(ranks.size() == 2);
    CHECK(*ranks.begin() != *std::next(ranks.begin()));
  }
  CHECK_THROWS_AS(plan_copies(index, std::vector<std::string>{"a", ""}, 2), UsageError);
}

TEST_CASE("a copy per node splits each node's copy over its own ranks", "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 10);
  const std::vector<std::string> hosts{"a", "b", "a", "b", "b"};
  const auto regions = plan_copies(index, hosts, replicas_per_node);
  for (const auto& ranks : holders_by_sample(regions, 10)) {
    std::multiset<std::string> on;
    for (int r : ranks) on.insert(hosts[static_cast<std::size_t>(r)]);
    CHECK(on == std::multiset<std::string>{"a", "b"});
  }
}

TEST_CASE("coverage: healthy, degraded after a loss, lost when every copy is gone", "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 30);
  const std::vector<std::string> hosts{"a", "b", "c"};
  const auto regions = plan_copies(index, hosts, 2);
  CHECK(std::string(coverage(regions, live_but(3, {}), hosts, 2, 30).state()) == "healthy");
  const auto one = coverage(regions, live_but(3, {1}), hosts, 2, 30);
  CHECK(std::string(one.state()) == "degraded");
  CHECK(one.lost_ranks == std::vector<int>{1});
  CHECK(one.samples_short == 20);  // rank 1 held 2 shards of 10
  CHECK(one.samples_lost == 0);
  uint64_t listed = 0;
  for (const auto& r : one.short_ranges) listed += r.count();
  CHECK(listed == 20);
  CHECK(one.lost_ranges.empty());
  const auto two = coverage(regions, live_but(3, {1, 2}), hosts, 2, 30);
  CHECK(std::string(two.state()) == "lost");
  CHECK(two.samples_lost == 10);
  REQUIRE(two.lost_ranges.size() == 1);
  CHECK(two.lost_ranges[0].count() == 10);
}

TEST_CASE("a repair brings every sample back to its copies on live ranks", "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 40);
  const std::vector<std::string> hosts{"a", "b", "c", "d"};
  auto regions = plan_copies(index, hosts, 2);
  const auto live_hosts = hosts_without(hosts, {2});
  const auto added = plan_repair(index, regions, live_hosts, 2);
  REQUIRE(!added.empty());
  for (const auto& g : added) CHECK(g.rank != 2);
  regions.insert(regions.end(), added.begin(), added.end());
  const auto after = coverage(regions, live_but(4, {2}), hosts, 2, 40);
  CHECK(std::string(after.state()) == "healthy");
  // Nothing more to add.
  CHECK(plan_repair(index, regions, live_hosts, 2).empty());
}

TEST_CASE("the lookup finds every region holding a sample, in listed order", "[placement]") {
  const std::vector<PlacedRange> regions{{0, 0, 10}, {1, 5, 20}, {2, 10, 20}, {3, 0, 5}};
  const Placement p(regions, 20);
  REQUIRE(p.stretches() == 3);
  const auto at = [&](uint64_t s) {
    const auto h = p.holders(p.stretch_of(s));
    return std::vector<uint32_t>(h.begin(), h.end());
  };
  CHECK(at(0) == std::vector<uint32_t>{0, 3});
  CHECK(at(7) == std::vector<uint32_t>{0, 1});
  CHECK(at(19) == std::vector<uint32_t>{1, 2});
  CHECK(p.stretch(p.stretch_of(7)).first == 5);
  CHECK(p.stretch(p.stretch_of(7)).last == 10);
  CHECK_THROWS_AS(Placement(std::vector<PlacedRange>{{0, 0, 10}}, 12), IndexError);
  CHECK_THROWS_AS(Placement(std::vector<PlacedRange>{{0, 0, 13}}, 12), IndexError);
}

TEST_CASE("copies keep off a host that holds one whenever another host is free", "[placement]") {
  test::TempDir dir;
  const auto index = even_dataset(dir, 30);
  for (const auto& [hosts, k] :
       std::vector<std::pair<std::vector<std::string>, int>>{{{"a", "a", "b"}, 2},
                                                             {{"a", "a", "b", "b", "c"}, 3},
                                                             {{"a", "a", "b", ""}, 2},
                                                             {{"a", "b", "a", "b", "a", "b"}, 2}}) {
    std::string warning;
    const auto regions = plan_copies(index, hosts, k, &warning);
    CHECK(warning.empty());
    for (const auto& ranks : holders_by_sample(regions, 30)) {
      std::set<std::string> on;
      for (int r : ranks) on.insert(hosts[static_cast<std::size_t>(r)]);
      CHECK(on.size() == static_cast<std::size_t>(k));
      CHECK(ranks.size() == static_cast<std::size_t>(k));
    }
  }
}
