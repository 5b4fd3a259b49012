// The control plane at scale, proven in simulated time: the production logic (NodeLeaderCore,
// CoordinatorCore) on every node of a simulated store of 1,000 and 10,000 ranks (4 a node),
// with costs measured on this machine first. The targets are the scaling issue's; today's flat
// protocol runs in the same simulator as the baseline.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "cluster/control_scenario.hpp"
#include "cluster/message_costs.hpp"

using namespace ddstage::detail;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif
/// The largest store simulated. The sanitizers slow this logic 30-fold and look for memory
/// errors, which the same code shows at any size: they check it at 2,000 ranks, Release at
/// 10,000 too.
constexpr int at_scale = sanitized ? 2000 : 10000;

const SimCosts& costs() {
  static const SimCosts measured = measure_message_costs(100);
  return measured;
}

double p99(std::vector<double> v) {
  REQUIRE_FALSE(v.empty());
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1];
}

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

/// A hog on every core at 4x the core count: this node's share of a core is a fifth, and each
/// wake-up waits up to 100 ms for the CPU.
void starve(ControlScenario& s) {
  s.slowdown = 5;
  s.cpu_wait = milliseconds(100);
}

/// Every crashed node, and no other, is known dead everywhere within 5 s (p99), and every live
/// node holds the coordinator's last view.
void check_crashes_found(const SimReport& r, const ControlScenario& s) {
  CHECK(p99(r.detect_node_s) <= 5.0);
  CHECK(sorted(r.declared_dead) == sorted(s.crashed()));
  CHECK(r.converged);
}

}  // namespace

TEST_CASE("costs measured for the simulator are real and positive", "[control][simulation]") {
  CHECK(costs().message.count() > 0);
  CHECK(costs().connect > costs().message);
}

TEST_CASE("status over the tree answers for every rank", "[control][simulation]") {
  const int ranks = GENERATE(1000, at_scale);
  ControlScenario s;
  s.ranks = ranks;
  s.commands = 3;
  s.end = seconds(8);
  const auto r = simulate_tree(s, ClusterTimings{}, costs());
  REQUIRE(r.command_s.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r.command_answered[i] == static_cast<uint64_t>(ranks));
    CHECK(r.command_missing[i] == 0);
    CHECK(r.command_s[i] < 1.0);
  }
  CHECK(r.declared_dead.empty());
  CHECK(r.views == 0);
}

TEST_CASE("a dead process is known everywhere within 1 s, a dead node within 5 s",
          "[control][simulation]") {
  const int ranks = GENERATE(1000, at_scale);
  ControlScenario s;
  s.ranks = ranks;
  s.end = seconds(12);
  SECTION("processes") {
    s.kill_ranks = 4;
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    REQUIRE(r.detect_rank_s.size() == 4);
    for (double d : r.detect_rank_s) CHECK(d <= 1.0);
    CHECK(r.declared_dead.empty());
    CHECK(r.views == 1);  // four exits within the coalescing window: one update
    CHECK(r.converged);
  }
  SECTION("a node, and processes beside it") {
    // Node 1 leads 16 others: until it is found dead, its subtree hears no view through it.
    s.crash_nodes = 1;
    s.kill_ranks = 2;
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    REQUIRE(r.detect_node_s.size() == 1);
    for (double d : r.detect_rank_s) CHECK(d <= 5.0);
    check_crashes_found(r, s);
  }
}

TEST_CASE("64 nodes lost at once: marked within 1 s of each other, seen within 5 s at p99",
          "[control][simulation]") {
  ControlScenario s;
  s.ranks = at_scale;
  s.crash_nodes = 64;
  s.commands = 1;
  s.command_at = seconds(12);
  s.end = seconds(15);
  const auto r = simulate_tree(s, ClusterTimings{}, costs());
  check_crashes_found(r, s);
  CHECK(r.verdict_spread_s <= 1.0);
  CHECK(r.views <= 10);
  // Node 1 was a leader of 16: its children now answer through the root.
  REQUIRE(r.command_answered.size() == 1);
  CHECK(r.command_answered[0] == static_cast<uint64_t>(at_scale - 64 * 4));
}

TEST_CASE("no false deaths with every core busy, 2 s stops and 1 % message loss",
          "[control][simulation]") {
  const int ranks = GENERATE(1000, at_scale);
  ControlScenario s;
  s.ranks = ranks;
  starve(s);
  s.loss = 0.01;
  s.pause_nodes = s.nodes() / 100;
  s.commands = 5;
  s.end = seconds(20);
  const auto r = simulate_tree(s, ClusterTimings{}, costs());
  CHECK(r.declared_dead.empty());
  CHECK(r.views == 0);
  // A command that meets a stopped node waits for it (or, past its time, reports it missing:
  // never dead).
  REQUIRE(r.command_s.size() == 5);
  for (std::size_t i = 0; i < 5; ++i)
    CHECK(r.command_answered[i] + r.command_missing[i] == static_cast<uint64_t>(ranks));
  CHECK(std::count(r.command_missing.begin(), r.command_missing.end(), 0) >= 3);
}

TEST_CASE("dead processes and nodes are still found on a starved, lossy machine",
          "[control][simulation]") {
  ControlScenario s;
  s.ranks = at_scale;
  starve(s);
  s.loss = 0.01;
  s.end = seconds(15);
  SECTION("processes") {
    s.kill_ranks = 8;
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    for (double d : r.detect_rank_s) CHECK(d <= 1.0);
    CHECK(r.declared_dead.empty());
    CHECK(r.converged);
  }
  SECTION("nodes") {
    s.crash_nodes = 16;
    check_crashes_found(simulate_tree(s, ClusterTimings{}, costs()), s);
  }
}

TEST_CASE("a partition that heals in 2 s costs nothing; one that lasts loses exactly its side",
          "[control][simulation]") {
  ControlScenario s;
  s.ranks = at_scale;
  s.partition_nodes = 50;
  SECTION("2 s") {
    s.partition_length = seconds(2);
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    CHECK(r.declared_dead.empty());
    CHECK(r.converged);
  }
  SECTION("for good") {
    s.partition_length = seconds(100);
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    CHECK(sorted(r.declared_dead) == s.partitioned());
  }
}

TEST_CASE("the same faults end in the same state whatever the message order",
          "[control][simulation]") {
  ControlScenario s;
  s.ranks = 1000;
  s.crash_nodes = 8;
  s.kill_ranks = 4;
  s.loss = 0.01;
  s.end = seconds(12);
  std::vector<int> first;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    s.seed = seed;
    const auto r = simulate_tree(s, ClusterTimings{}, costs());
    CHECK(r.converged);
    if (seed == 1) first = sorted(r.declared_dead);
    CHECK(sorted(r.declared_dead) == first);
  }
  CHECK(first == sorted(s.crashed()));
}

TEST_CASE("the same seed replays the same run", "[control][simulation]") {
  ControlScenario s;
  s.ranks = 1000;
  s.crash_nodes = 4;
  s.loss = 0.05;
  s.end = seconds(10);
  const auto a = simulate_tree(s, ClusterTimings{}, costs());
  const auto b = simulate_tree(s, ClusterTimings{}, costs());
  CHECK(a.messages == b.messages);
  CHECK(a.detect_node_s == b.detect_node_s);
}

TEST_CASE(
    "today's flat protocol, modelled: 3,333 connects/s, one loss marked per 1.5 s, "
    "false deaths past the fd limit",
    "[control][simulation]") {
  SECTION("heartbeats at scale") {
    ControlScenario s;
    s.ranks = at_scale;
    s.end = milliseconds(30500);  // ten beats of every rank, all of them handled
    const auto r = simulate_flat(s, FlatSettings{}, costs());
    CHECK(r.coordinator_inbound_per_s == Approx(at_scale / 3.0).epsilon(0.05));
  }
  SECTION("marking 64 lost nodes") {
    ControlScenario s;
    s.ranks = 1000;
    s.crash_nodes = 64;
    s.crash_at = seconds(1);
    s.end = seconds(430);
    const auto r = simulate_flat(s, FlatSettings{}, costs());
    // 256 ranks, one per 1.5 s check, after the 30 s peer_timeout.
    CHECK(*std::max_element(r.detect_node_s.begin(), r.detect_node_s.end()) ==
          Approx(30 + 255 * 1.5).margin(3.0));
    CHECK(r.views == 256);
  }
  SECTION("a status at scale") {
    ControlScenario s;
    s.ranks = at_scale;
    s.commands = 1;
    s.end = seconds(5);
    const auto r = simulate_flat(s, FlatSettings{}, costs());
    CHECK(r.declared_dead.size() == static_cast<std::size_t>(at_scale - 1 - (1024 - 64)));
  }
  SECTION("the tree's coordinator hears its 16 children, whatever the size") {
    ControlScenario s;
    s.end = seconds(12);
    for (int ranks : {1000, at_scale}) {
      s.ranks = ranks;
      // Keepalives both ways on 16 links, four a second each way.
      CHECK(simulate_tree(s, ClusterTimings{}, costs()).coordinator_inbound_per_s < 16 * 4 * 1.2);
    }
  }
}
