// The batch reader over a route table built in this process: planning (coalescing, the
// caller's order), unreachable routes, a route watch, and a transport that fails mid-batch,
// through a test transport of our own (the reader's side of "in flight by construction": the
// transports' own tests inject failures into the real backends).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "ddstage/error.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "read/batch_reader.hpp"
#include "test_support.hpp"

using namespace ddstage;
using namespace ddstage::detail;
using Catch::Contains;

namespace {

constexpr uint64_t batch_samples = 40;

uint64_t size_of(uint64_t i) {
  return (i * 37) % 300 + 1;
}

/// Reads of the ranks routed over "fabric": posts are recorded and land only in wait(), as an
/// RDMA read lands after its post; fail_wait makes wait() throw with the reads still pending.
class TestTransport final : public Transport {
 public:
  explicit TestTransport(std::span<const std::byte> region) : m_region(region) {}
  std::string_view name() const noexcept override { return "fabric"; }
  void post(std::span<const ReadOp> reads) override {
    pending.insert(pending.end(), reads.begin(), reads.end());
  }
  void wait() override {
    std::this_thread::sleep_for(progressing_for);
    if (fail_wait) throw TransportError("read failed halfway", {.rank = 1}, false);
    land();
  }
  void quiesce() noexcept override {
    ++quiesced;
    pending.clear();  // cancelled: none of them may land any more
  }
  void land() {
    for (const ReadOp& op : pending) std::memcpy(op.dest, m_region.data() + op.offset, op.bytes);
    posted.insert(posted.end(), pending.begin(), pending.end());
    pending.clear();
  }

  std::vector<ReadOp> pending, posted;
  bool fail_wait = false;
  std::chrono::milliseconds progressing_for{0};  // how long wait() takes before it ends
  int quiesced = 0;

 private:
  std::span<const std::byte> m_region;
};

/// Records what the reader asks of the watch; refuses batches of rank `refuse` (gone) and of
/// rank `stalled` (alive, but failing this reader's batches).
class TestWatch final : public RouteWatch {
 public:
  void check(std::span<const int> owners) override {
    for (int r : owners) {
      if (r == refuse)
        throw Error(ErrorKind::runtime, "rank " + std::to_string(r) + " is gone", {.rank = r});
      if (r == stalled)
        throw Error(ErrorKind::runtime, "rank " + std::to_string(r) + " stalls", {.rank = r});
    }
  }
  void explain(const Error& error, std::chrono::steady_clock::time_point) override {
    explained = error.what();
  }
  bool alive(int r) const override { return r != refuse; }
  void stage(uint32_t region, std::span<const uint64_t> ids) override {
    staged.emplace_back(region, std::vector<uint64_t>(ids.begin(), ids.end()));
    if (refuse_stage) throw Error(ErrorKind::runtime, "no answer", {.rank = 1});
  }

  int refuse = -1;
  int stalled = -1;
  bool refuse_stage = false;
  std::string explained;
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> staged;
};

/// Two ranks' shards filled from a real flattened dataset: rank 0 read through shm (memcpy
/// from its mapped region), rank 1 through TestTransport, or unreachable. With `replica`, a
/// rank 2 holds a second copy of rank 1's shard, mapped but farther than rank 1 (distance 2),
/// so that a reader takes it only once it gives rank 1 up.
struct TwoRanks final : RouteSource {
  explicit TwoRanks(const test::TempDir& dir, bool rank1_reachable = true, bool replica = false)
      : index(make_index(dir)),
        plan(ShardPlan::balance(index, 2)),
        placement(ranges(replica), index.samples()) {
    table.index = &index;
    table.placement = &placement;
    table.ranks = replica ? 3 : 2;
    table.settings = Settings::resolve({}, {}, std::nullopt, false);
    for (int r = 0; r < 2; ++r) {
      layouts.emplace_back(index, plan.range(r));
      regions.emplace_back(layouts.back().total_bytes());
      fill_shard(index, layouts.back(), regions.back());
    }
    table.targets.mapped = {regions[0], {}};
    table.routes.resize(2);
    for (int r = 0; r < 2; ++r)
      table.routes[r] = {.range = plan.range(r), .rank = r, .distance = r, .layout = &layouts[r]};
    table.routes[0].via = TransportId::shm;
    table.routes[0].mapped = regions[0];
    if (rank1_reachable) table.routes[1].via = TransportId::fabric;
    table.routes[1].unreachable = {ErrorKind::usage, "rank 1 is on the far side"};
    if (replica) {
      table.routes.push_back({.range = plan.range(1),
                              .rank = 2,
                              .distance = 2,
                              .via = TransportId::shm,
                              .layout = &layouts[1],
                              .mapped = regions[1]});
      table.targets.mapped.push_back(regions[1]);
    }
  }

  std::vector<PlacedRange> ranges(bool replica) const {
    auto out = ranges_of(plan);
    if (replica) out.push_back({2, plan.range(1).first, plan.range(1).last});
    return out;
  }

  static Index make_index(const test::TempDir& dir) {
    for (uint64_t i = 0; i < batch_samples; ++i) {
      test::write_file(dir / "src" / (std::to_string(1000 + i) + ".bin"),
                       test::pattern_bytes(size_of(i), i));
    }
    return test::flatten_to(dir / "v.ddx", test::request_for({dir / "src"}));
  }

  const RouteTable& routes() const noexcept override { return table; }
  std::unique_ptr<RouteWatch> watch() const override {
    auto w = std::make_unique<TestWatch>();
    last_watch = w.get();
    return w;
  }

  Index index;
  ShardPlan plan;
  Placement placement;
  std::vector<ShardLayout> layouts;
  std::vector<std::vector<std::byte>> regions;
  RouteTable table;
  mutable TestWatch* last_watch = nullptr;
};

// The reader opens its transports through this: the real shm transport, the test one for fabric.
TwoRanks* g_ranks = nullptr;
TestTransport* g_remote = nullptr;

std::unique_ptr<Transport> open_for_test(TransportId id, const TransportTargets& targets,
                                         const Settings& settings) {
  if (id != TransportId::fabric) return open_transport(id, targets, settings);
  auto t = std::make_unique<TestTransport>(g_ranks->regions[1]);
  g_remote = t.get();
  return t;
}

std::vector<std::byte> expected(std::initializer_list<uint64_t> ids) {
  std::vector<std::byte> out;
  for (uint64_t id : ids) {
    const auto row = test::pattern_bytes(size_of(id), id);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

struct Fixture {
  explicit Fixture(bool rank1_reachable = true, bool replica = false)
      : ranks(std::make_shared<TwoRanks>(dir, rank1_reachable, replica)) {
    g_ranks = ranks.get();
    g_remote = nullptr;
    reader.emplace(ranks, open_for_test);
  }
  std::vector<std::byte> read(std::vector<uint64_t> ids, bool verify = false) {
    std::vector<std::byte> dest(reader->batch_bytes(field(), ids), std::byte{0xEE});
    reader->get_batch(field(), ids, dest, verify);
    return dest;
  }

  const std::string& field() const { return ranks->index.fields()[0].name; }

  test::TempDir dir;
  std::shared_ptr<TwoRanks> ranks;
  std::optional<BatchReader> reader;
};

}  // namespace

TEST_CASE("batch reader: rows of both routes land in the caller's order, runs coalesced",
          "[batch_reader]") {
  Fixture f;
  const uint64_t a = f.ranks->plan.range(1).first;
  CHECK(f.read({0, 1, 2, a, a + 1, a + 2, 3}, true) == expected({0, 1, 2, a, a + 1, a + 2, 3}));
  // One remote read for the run a..a+2: consecutive samples of one rank, back to back in dest.
  REQUIRE(g_remote->posted.size() == 1);
  CHECK(g_remote->posted[0].bytes == size_of(a) + size_of(a + 1) + size_of(a + 2));
  CHECK(g_remote->posted[0].target == 1);
  g_remote->posted.clear();
  // Repeats and reversed runs are separate reads: the region or dest does not continue.
  CHECK(f.read({a, a + 1, a, a + 1, a + 2, a + 1}) == expected({a, a + 1, a, a + 1, a + 2, a + 1}));
  CHECK(g_remote->posted.size() == 3);
  CHECK(g_remote->quiesced == 0);
}

TEST_CASE("batch reader: a batch that touches only the mapped rank posts nothing remote",
          "[batch_reader]") {
  Fixture f;
  CHECK(f.read({5, 4, 5}) == expected({5, 4, 5}));
  CHECK(g_remote->posted.empty());
}

TEST_CASE("batch reader: a wrong destination size is refused before anything is posted",
          "[batch_reader]") {
  Fixture f;
  const uint64_t a = f.ranks->plan.range(1).first;
  std::vector<std::byte> dest(size_of(a) + 1);
  const std::vector<uint64_t> ids{a};
  CHECK_THROWS_WITH(f.reader->get_batch(f.field(), ids, dest, false),
                    Contains("destination holds"));
  CHECK(g_remote->pending.empty());
  CHECK(g_remote->posted.empty());
}

TEST_CASE("batch reader: a transport failing mid-batch is quiesced before get_batch throws",
          "[batch_reader]") {
  Fixture f;
  const uint64_t a = f.ranks->plan.range(1).first;
  g_remote->fail_wait = true;
  const std::vector<uint64_t> ids{0, a, a + 1};
  std::vector<std::byte> dest(f.reader->batch_bytes(f.field(), ids), std::byte{0xEE});
  CHECK_THROWS_AS(f.reader->get_batch(f.field(), ids, dest, false), TransportError);
  CHECK(g_remote->quiesced == 1);
  CHECK(f.ranks->last_watch->explained.find("read failed halfway") != std::string::npos);
  // What was posted can no longer land: the rows of rank 1 stay as the caller left them.
  g_remote->land();
  const auto rank1 = std::span(dest).subspan(size_of(0));
  CHECK(std::all_of(rank1.begin(), rank1.end(), [](std::byte b) { return b == std::byte{0xEE}; }));
  // The reader is usable afterwards.
  g_remote->fail_wait = false;
  CHECK(f.read({a, 0}) == expected({a, 0}));
}

TEST_CASE("batch reader: an unreachable rank fails only the batches that need it",
          "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/false);
  const uint64_t a = f.ranks->plan.range(1).first;
  CHECK(g_remote == nullptr);  // no route uses fabric: no transport opened for it
  CHECK(f.read({1, 0}) == expected({1, 0}));
  CHECK_THROWS_AS(f.read({0, a}), UsageError);
  CHECK_THROWS_WITH(f.read({a}), Contains("rank 1 is on the far side"));
}

TEST_CASE("batch reader: the route watch refuses a batch before anything is read",
          "[batch_reader]") {
  Fixture f;
  const uint64_t a = f.ranks->plan.range(1).first;
  f.ranks->last_watch->refuse = 1;
  CHECK(f.read({0}) == expected({0}));
  CHECK_THROWS_WITH(f.read({0, a}), Contains("rank 1 is gone"));
  CHECK(g_remote->pending.empty());
  CHECK(g_remote->posted.empty());
}

TEST_CASE("batch reader: a rank failing mid-batch is given up for another copy in the same call",
          "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/true, /*replica=*/true);
  const uint64_t a = f.ranks->plan.range(1).first;
  // The nearest copy first: rank 1's reads go over the test transport.
  CHECK(f.read({a, 0}) == expected({a, 0}));
  REQUIRE(g_remote->posted.size() == 1);
  g_remote->fail_wait = true;
  CHECK(f.read({0, a, a + 1}, true) == expected({0, a, a + 1}));
  CHECK(g_remote->quiesced == 1);
  // Given up for good: later batches go to rank 2's copy without trying rank 1.
  g_remote->posted.clear();
  CHECK(f.read({a + 2}) == expected({a + 2}));
  CHECK(g_remote->posted.empty());
  CHECK(g_remote->quiesced == 1);
}

TEST_CASE("batch reader: without another live copy the failure stands", "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/true, /*replica=*/true);
  const uint64_t a = f.ranks->plan.range(1).first;
  f.ranks->last_watch->refuse = 2;  // the copy's rank is gone too
  g_remote->fail_wait = true;
  CHECK_THROWS_AS(f.read({a}), TransportError);
}

TEST_CASE("batch reader: a lazy region's ids are staged by its owner before they are read",
          "[batch_reader]") {
  Fixture f;
  f.ranks->table.routes[1].lazy = true;
  f.reader.emplace(f.ranks, open_for_test);  // routes are read when a reader is made
  const uint64_t a = f.ranks->plan.range(1).first;
  TestWatch& watch = *f.ranks->last_watch;
  CHECK(f.read({a + 2, 0, a, a + 2}) == expected({a + 2, 0, a, a + 2}));
  REQUIRE(watch.staged.size() == 1);
  CHECK(watch.staged[0].first == 1);
  CHECK(watch.staged[0].second == std::vector<uint64_t>{a, a + 2});  // sorted, once each
  // An owner that does not stage them: nothing is posted for the batch.
  g_remote->posted.clear();
  watch.refuse_stage = true;
  CHECK_THROWS_WITH(f.read({a}), Contains("no answer"));
  CHECK(g_remote->posted.empty());
  CHECK(g_remote->pending.empty());
}

TEST_CASE("batch reader: a copy given up on after a stall serves again when the other one dies",
          "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/true, /*replica=*/true);
  const uint64_t a = f.ranks->plan.range(1).first;
  g_remote->fail_wait = true;
  CHECK(f.read({a}) == expected({a}));  // rank 1 stalled: given up, rank 2's copy read
  g_remote->fail_wait = false;
  f.ranks->last_watch->refuse = 2;  // now rank 2 dies: rank 1 is all there is
  g_remote->posted.clear();
  CHECK(f.read({a + 1}) == expected({a + 1}));
  CHECK(g_remote->posted.size() == 1);
}

TEST_CASE("batch reader: reads that progressed for longer than read_timeout still fail over",
          "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/true, /*replica=*/true);
  const uint64_t a = f.ranks->plan.range(1).first;
  f.ranks->table.settings =
      Settings::resolve({}, {{"DDSTAGE_READ_TIMEOUT", "100ms"}}, std::nullopt, false);
  // Slow but moving (a loaded node), then rank 1 fails: its samples still have rank 2's copy.
  g_remote->progressing_for = std::chrono::milliseconds(300);
  g_remote->fail_wait = true;
  CHECK(f.read({0, a, a + 1}) == expected({0, a, a + 1}));
  CHECK(g_remote->quiesced == 1);
}

TEST_CASE("batch reader: copies that all fail one batch are each given up once, then it fails",
          "[batch_reader]") {
  Fixture f(/*rank1_reachable=*/true, /*replica=*/true);
  const uint64_t a = f.ranks->plan.range(1).first;
  g_remote->fail_wait = true;        // rank 1, the nearer copy
  f.ranks->last_watch->stalled = 2;  // rank 2 alive, but failing too
  CHECK_THROWS_WITH(f.read({a}), Contains("rank 2 stalls"));
  // Not the two taking turns for ever: rank 1 was tried once.
  CHECK(g_remote->quiesced == 1);
  // A later batch may go back to rank 1 once rank 2 fails it.
  g_remote->fail_wait = false;
  CHECK(f.read({a + 1}) == expected({a + 1}));
}
