#include <catch2/catch.hpp>

#include <algorithm>

#include "cluster/leader_tree.hpp"
#include "cluster/split_mix.hpp"
#include "ddstage/error.hpp"

using ddstage::detail::LeaderTree;

namespace {

/// Every live node but the root hangs under exactly one live node, the one it calls its parent.
void check_tree(const LeaderTree& tree, const std::vector<bool>& dead) {
  std::vector<int> seen(static_cast<std::size_t>(tree.nodes()), 0);
  for (int n = 0; n < tree.nodes(); ++n) {
    if (dead[static_cast<std::size_t>(n)]) continue;
    for (int c : tree.children(n, dead)) {
      REQUIRE_FALSE(dead[static_cast<std::size_t>(c)]);
      REQUIRE(tree.parent(c, dead) == n);
      ++seen[static_cast<std::size_t>(c)];
    }
  }
  for (int n = 1; n < tree.nodes(); ++n)
    REQUIRE(seen[static_cast<std::size_t>(n)] == (dead[static_cast<std::size_t>(n)] ? 0 : 1));
  REQUIRE(seen[0] == 0);
}

}  // namespace

TEST_CASE("the leader tree reaches 2,500 nodes in 3 hops at fan-out 16", "[control]") {
  const LeaderTree tree(2500, 16);
  CHECK(tree.depth() == 3);
  CHECK(LeaderTree(1, 16).depth() == 0);
  CHECK(LeaderTree(17, 16).depth() == 1);
  CHECK(LeaderTree(18, 16).depth() == 2);
  const std::vector<bool> none(2500, false);
  CHECK(tree.parent(0, none) == -1);
  CHECK(tree.parent(17, none) == 1);
  CHECK(tree.children(1, none).size() == 16);
  check_tree(tree, none);
}

TEST_CASE("a dead leader's children attach to its nearest live ancestor", "[control]") {
  const LeaderTree tree(2500, 16);
  std::vector<bool> dead(2500, false);
  dead[1] = dead[17] = true;                   // a child of the root, and one of its children
  CHECK(tree.parent(17 * 16 + 1, dead) == 0);  // 273: under 17, under 1: the root adopts it
  CHECK(tree.parent(18, dead) == 0);
  const auto root = tree.children(0, dead);
  CHECK(std::count(root.begin(), root.end(), 18) == 1);
  CHECK(std::count(root.begin(), root.end(), 1) == 0);
  check_tree(tree, dead);

  ddstage::detail::SplitMix random(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<bool> some(2500, false);
    for (int i = 0; i < 100; ++i) some[1 + random.below(2499)] = true;
    check_tree(tree, some);
  }
}

TEST_CASE("a leader tree of no nodes or of fan-out 1 is refused", "[control]") {
  CHECK_THROWS_AS(LeaderTree(0, 16), ddstage::Error);
  CHECK_THROWS_WITH(LeaderTree(10, 1), Catch::Contains("fan-out of at least 2"));
}
