// Client reads from a real store built in this process: shards loaded into shared memory and a
// descriptor written next to them, no server process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <climits>
#include <filesystem>
#include <random>
#include <thread>

#include "client_test_store.hpp"
#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"

using namespace ddstage;
using Catch::Contains;

namespace {

using namespace ddstage::test;

std::vector<uint64_t> ids_of_rank(const ShardPlan& plan, int r) {
  return {plan.range(r).first, plan.range(r).last - 1, plan.range(r).first};
}

std::vector<std::string> leftover_segments() {
  const auto prefix = "ddstage-test-" + std::to_string(::getpid()) + "-";
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().starts_with(prefix)) found.push_back(e.path().string());
  }
  return found;
}

/// A process of this host: alive until kill(), so a rank can die while a client reads.
class ChildProcess {
 public:
  ChildProcess() : m_pid(::fork()) {
    if (m_pid == 0) {
      for (;;) ::pause();
    }
    REQUIRE(m_pid > 0);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { kill(); }

  int64_t pid() const { return m_pid; }
  /// Kills it and waits until it has exited, leaving a zombie that kill(pid, 0) still finds.
  void exit_unreaped() {
    ::kill(m_pid, SIGKILL);
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOWAIT);
  }
  void kill() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
    m_pid = -1;
  }

 private:
  pid_t m_pid;
};

}  // namespace

TEST_CASE("client: batches from shared memory match origin byte for byte", "[client]") {
  {
    TestStore store;
    // The reader keeps the dataset's mappings alive after Client and Dataset are gone.
    Reader reader = Client(store.dir()).open("d").reader();
    const std::vector<std::vector<uint64_t>> batches = {
        mixed_ids(1), mixed_ids(2), {}, {7}, {3, 10, 17}, {samples - 1, 0, samples - 1}};
    for (const auto& ids : batches) {
      for (uint32_t f : {0u, 1u}) {
        const std::string field = store.index().fields()[f].name;
        INFO("field " << field << ", " << ids.size() << " ids");
        const auto expect = origin_batch(store.index(), f, ids);
        CHECK(store_batch(reader, field, ids) == expect);
        CHECK(store_batch(reader, field, ids, true) == expect);
        std::vector<uint64_t> sizes(ids.size());
        reader.row_sizes(field, ids, sizes);
        for (std::size_t i = 0; i < ids.size(); ++i) {
          REQUIRE(sizes[i] == (f == 0 ? x_bytes : g_bytes(ids[i])));
        }
      }
    }
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: verify names the block whose bytes in the store are damaged", "[client]") {
  {
    TestStore store;
    auto dataset = Client(store.dir()).open("d");
    auto reader = dataset.reader();
    const uint64_t bad = store.plan().range(1).first + 2;
    store.damage(bad, 0);
    const std::vector<uint64_t> ids = {5, bad, 200};
    const auto expect = origin_batch(store.index(), 0, ids);
    CHECK(store_batch(reader, "x", ids) != expect);  // without verify the damage goes through
    Bytes dest(expect.size());
    try {
      reader.get_batch("x", ids, dest, true);
      FAIL("no ChecksumError");
    } catch (const ChecksumError& e) {
      // x's rows are one run: the damage is found in its block, which the error names, at the
      // lowest id the batch asked of it.
      const Block block = store.index().block(bad, 0);
      REQUIRE(block.rows > 1);
      REQUIRE(block.first_sample <= 5);
      CHECK(e.context().sample == 5);
      CHECK(e.context().field == "x");
      CHECK_THAT(e.what(), Contains(fmt::format("block of samples {}..{}", block.first_sample,
                                                block.first_sample + block.rows - 1)));
      // The block's bytes came from every rank it spans: no one rank is blamed.
      CHECK(!e.context().rank);
      CHECK_THAT(e.what(), Contains("read from rank 0, rank 1 and rank 2"));
    }
    CHECK(store_batch(reader, "g", ids, true) == origin_batch(store.index(), 1, ids));
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: verify reads a block's rows on other live ranks from the store, not origin",
          "[client]") {
  {
    TestStore store;
    auto reader = Client(store.dir()).open("d").reader();
    // x is one block across the ranks: verifying one row of rank 0 reads rows of ranks 1 and 2.
    const uint64_t asked = 5;
    const Block block = store.index().block(asked, 0);
    REQUIRE(block.first_sample + block.rows > store.plan().range(1).first);
    const std::vector<uint64_t> ids = {asked};
    const auto expect = origin_batch(store.index(), 0, ids);
    // Origin touched (bytes unchanged), then gone: the store still holds every row of the block.
    const auto source = store.dir() / "src/x.bin";
    fs::last_write_time(source, fs::last_write_time(source) + std::chrono::seconds(5));
    CHECK(store_batch(reader, "x", ids, true) == expect);
    fs::remove(source);
    CHECK(store_batch(reader, "x", ids, true) == expect);
    // Damage in rank 1's part of the block is still found, and rank 1 is among those named.
    store.damage(store.plan().range(1).first + 2, 0);
    Bytes dest(expect.size());
    try {
      reader.get_batch("x", ids, dest, true);
      FAIL("no ChecksumError");
    } catch (const ChecksumError& e) {
      CHECK(e.context().sample == asked);
      CHECK(!e.context().rank);
      CHECK_THAT(e.what(), Contains("rank 1"));
    }
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: bad requests are usage errors before anything is read", "[client]") {
  {
    TestStore store;
    Client client(store.dir());
    CHECK_THROWS_WITH(client.open("nope"), Contains("nope") && Contains("loaded: d"));
    CHECK_THROWS_AS(client.open("nope"), UsageError);
    auto reader = client.open("d").reader();
    const std::vector<uint64_t> ids = {1, 2, 3};
    Bytes dest(3 * x_bytes, std::byte{0xee});
    CHECK_THROWS_WITH(reader.get_batch("y", ids, dest), Contains("'y'") && Contains("x, g"));
    CHECK_THROWS_AS(reader.get_batch("y", ids, dest), UsageError);
    const std::vector<uint64_t> out_of_range = {1, 2, samples};
    CHECK_THROWS_WITH(reader.get_batch("x", out_of_range, dest),
                      Contains("sample id 240") && Contains("240 samples"));
    CHECK_THROWS_AS(reader.get_batch("x", out_of_range, dest), UsageError);
    CHECK_THROWS_AS(reader.batch_bytes("x", out_of_range), UsageError);
    CHECK(dest == Bytes(3 * x_bytes, std::byte{0xee}));  // nothing was copied
    Bytes short_dest(3 * x_bytes - 1);
    CHECK_THROWS_WITH(reader.get_batch("x", ids, short_dest), Contains("batch needs 288"));
    CHECK_THROWS_AS(reader.get_batch("x", ids, short_dest), UsageError);
    std::vector<uint64_t> sizes(2);
    CHECK_THROWS_AS(reader.row_sizes("g", ids, sizes), UsageError);
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: a rank that is gone fails reads of its samples only", "[client]") {
  {
    TestStore store;
    ChildProcess rank1;
    const int64_t pid = rank1.pid();
    store.descriptor().ranks[1].pid = pid;
    store.write();
    auto reader = Client(store.dir()).open("d").reader();
    const auto ids1 = ids_of_rank(store.plan(), 1);
    CHECK(store_batch(reader, "g", ids1) == origin_batch(store.index(), 1, ids1));
    // After open: its segment stays mapped, only the per-batch check sees the rank is gone,
    // also while it is an unreaped zombie.
    rank1.exit_unreaped();
    auto late = Client(store.dir()).open("d").reader();  // rank 1 not even mapped
    const auto gone = "rank 1 (pid " + std::to_string(pid) + " on " + this_host() + ") is gone";
    auto expect_rank1_gone = [&](Reader& r) {
      try {
        store_batch(r, "g", mixed_ids(3));
        FAIL("no error for a dead rank");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::runtime);
        CHECK(e.context().rank == 1);
        CHECK_THAT(e.what(), Contains(gone));
      }
      for (int other : {0, 2}) {
        const auto ids = ids_of_rank(store.plan(), other);
        CHECK(store_batch(r, "x", ids, true) == origin_batch(store.index(), 0, ids));
      }
    };
    expect_rank1_gone(reader);
    expect_rank1_gone(late);
    rank1.kill();  // reaped
    expect_rank1_gone(reader);
    // Verify took rank 1's rows of x's one block from origin: under the freshness rule, which
    // origin.allow_stale lifts, as for any origin read.
    const auto ids0 = ids_of_rank(store.plan(), 0);
    const auto expect0 = origin_batch(store.index(), 0, ids0);
    const auto source = store.dir() / "src/x.bin";
    fs::last_write_time(source, fs::last_write_time(source) + std::chrono::seconds(5));
    auto fresh = Client(store.dir()).open("d").reader();
    CHECK(store_batch(fresh, "x", ids0) == expect0);
    CHECK_THROWS_AS(store_batch(fresh, "x", ids0, true), StaleError);
    auto stale = Client(store.dir(), Settings::resolve({{"origin.allow_stale", "true"}}, {},
                                                       std::nullopt, false))
                     .open("d")
                     .reader();
    CHECK(store_batch(stale, "x", ids0, true) == expect0);
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: a store whose rank 0 is gone is not running", "[client]") {
  {
    TestStore store;
    int64_t pid = 0;
    {
      ChildProcess rank0;
      pid = rank0.pid();
    }
    store.descriptor().ranks[0].pid = pid;
    store.write();
    CHECK_THROWS_WITH(Client(store.dir()),
                      Contains("is not running") && Contains("pid " + std::to_string(pid)));
    CHECK_THROWS_AS(Client(store.dir()), UsageError);
    test::TempDir empty;
    CHECK_THROWS_WITH(Client(empty.path()), Contains("no store at"));
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: samples of a rank on another node need the fabric transport", "[client]") {
  {
    TestStore store;
    store.descriptor().ranks[2].host = "elsewhere.invalid";
    store.write();
    auto reader = Client(store.dir()).open("d").reader();
    for (int r : {0, 1}) {
      const auto ids = ids_of_rank(store.plan(), r);
      CHECK(store_batch(reader, "g", ids, true) == origin_batch(store.index(), 1, ids));
    }
    const auto ids2 = ids_of_rank(store.plan(), 2);
    CHECK_THROWS_WITH(store_batch(reader, "x", ids2),
                      Contains("rank 2 on elsewhere.invalid is on another node") &&
                          Contains("--transport fabric"));
    CHECK_THROWS_AS(store_batch(reader, "x", ids2), UsageError);
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: readers on two threads read at once", "[client]") {
  {
    TestStore store;
    auto dataset = Client(store.dir()).open("d");
    std::vector<std::vector<uint64_t>> batches;
    std::vector<Bytes> expect[2];
    for (uint64_t seed = 10; seed < 16; ++seed) {
      batches.push_back(mixed_ids(seed));
      for (uint32_t f : {0u, 1u})
        expect[f].push_back(origin_batch(store.index(), f, batches.back()));
    }
    // Catch's assertions are not thread-safe: the threads count, the test checks.
    std::atomic<int> mismatches{0};
    std::atomic<int> errors{0};
    auto work = [&](std::size_t t) {
      try {
        auto reader = dataset.reader();
        Bytes dest;
        for (std::size_t round = 0; round < 300; ++round) {
          const std::size_t b = (round + t) % batches.size();
          const uint32_t f = round % 2;
          dest.resize(expect[f][b].size());
          reader.get_batch(f == 0 ? "x" : "g", batches[b], dest, round % 3 == 0);
          if (dest != expect[f][b]) ++mismatches;
        }
      } catch (...) {
        ++errors;
      }
    };
    std::thread one(work, 0);
    std::thread two(work, 1);
    one.join();
    two.join();
    CHECK(mismatches == 0);
    CHECK(errors == 0);
  }
  CHECK(leftover_segments().empty());
}

TEST_CASE("client: an index re-flattened after loading is refused, not misread", "[client]") {
  TestStore store;
  auto descriptor = StoreDescriptor::read(store.dir());
  descriptor.datasets[0].index_fingerprint ^= 1;
  descriptor.write(store.dir());
  CHECK_THROWS_WITH(Client(store.dir()).open("d"),
                    Catch::Contains("changed after") && Catch::Contains("reload"));
}

TEST_CASE("client: the profile counts each batch's rows, bytes and stages, only while on",
          "[client][profile]") {
  TestStore store;
  Reader reader = Client(store.dir()).open("d").reader();
  const auto ids = mixed_ids(3);
  profile::reset();
  store_batch(reader, "x", ids);
  CHECK(profile::snapshot().batches == 0);

  profile::enable();
  store_batch(reader, "x", ids);
  store_batch(reader, "g", ids, true);
  CHECK_THROWS_AS(store_batch(reader, "x", std::vector<uint64_t>{samples}), UsageError);
  profile::enable(false);
  store_batch(reader, "x", ids);

  const ProfileReport report = profile::snapshot();
  CHECK(report.batches == 2);  // the one that threw is not counted
  CHECK(report.rows == 2 * ids.size());
  CHECK(report.bytes == ids.size() * x_bytes + reader.batch_bytes("g", ids));
  CHECK(report.batch_ns.count() == 2);
  const auto& copy = report.stage_ns[static_cast<std::size_t>(ProfileStage::copy)];
  const auto& other = report.stage_ns[static_cast<std::size_t>(ProfileStage::other)];
  CHECK(copy.count() == 2);
  CHECK(other.count() == 2);
  CHECK(copy.sum() + other.sum() <= report.batch_ns.sum());
  CHECK(report.stage_ns[static_cast<std::size_t>(ProfileStage::post)].count() == 0);
  REQUIRE(report.paths.size() == 1);
  CHECK(report.paths[0] == std::pair<std::string, uint64_t>{"shm", 2});
  const std::string table = profile::format(report);
  CHECK_THAT(table, Contains("2 batches") && Contains("copy") && Contains("shm (2 batches)"));
  profile::reset();
  CHECK(profile::snapshot().batches == 0);
}
