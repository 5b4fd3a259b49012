#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "ddstage/error.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/store_cleanup.hpp"
#include "ddstage/tool/store_wait.hpp"
#include "ddstage/tool/tier_set.hpp"
#include "forked_rank.hpp"
#include "process.hpp"
#include "rank_lock.hpp"
#include "shm_namespace_rank.hpp"
#include "test_support.hpp"

using namespace ddstage;
using namespace ddstage::detail;
using ddstage::test::ShmNamespaceRank;
namespace fs = std::filesystem;

namespace {

std::string cleanup_store_id() {
  return test::unused_store_id("f1");
}

/// What a SIGKILLed server rank leaves: its lock and a segment. Returns its pid (reaped).
pid_t killed_rank(const std::string& id, int rank) {
  test::ForkedRank forked(id, rank);
  forked.kill();
  return forked.pid();
}

bool exists(const std::string& name) {
  return fs::exists(shm_directory() / name);
}

std::vector<std::string> removed_names(const CleanReport& r) {
  std::vector<std::string> out;
  for (const auto& f : r.removed) out.push_back(f.path.filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// A pid no process has: a child's, once it ended and was reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

/// Rank 0 recorded as a process that ended: only its lock (or the lack of one) tells.
StoreDescriptor descriptor_for(const std::string& id, const std::string& host) {
  StoreDescriptor d;
  d.token = random_token();
  d.id = id;
  d.control = "127.0.0.1:1";
  d.ranks.push_back(RankInfo{0, host, dead_pid(), {"local", "shm"}, 1024});
  return d;
}

}  // namespace

TEST_CASE(
    "clean removes a dead rank's files, keeps a live rank's, and a lockless segment unless forced",
    "[cleanup]") {
  const auto id = cleanup_store_id();
  RankLock live(id, 0);
  auto live_segment = ShmSegment::create("/ddstage-" + id + "-train-g1-r0", 4096);
  const auto dead = killed_rank(id, 2);
  // A libfabric shm queue of the dead rank's pid, and a segment whose rank has no lock at all.
  const auto queue = shm_directory() / (std::to_string(dead) + ":ddstage-test-queue");
  std::ofstream(queue) << "q";
  const auto lockless = ShmSegment::create("/ddstage-" + id + "-train-g1-r3", 4096);
  const std::string lockless_name = "ddstage-" + id + "-train-g1-r3";
  const std::vector<std::string> expected = {std::to_string(dead) + ":ddstage-test-queue",
                                             "ddstage-" + id + "-r2.lock",
                                             "ddstage-" + id + "-train-g1-r2"};

  const auto dry = clean_dead_ranks(id, true);
  CHECK(removed_names(dry) == expected);
  CHECK(exists("ddstage-" + id + "-r2.lock"));
  CHECK(fs::exists(queue));

  const auto report = clean_dead_ranks(id);
  CHECK(removed_names(report) == expected);
  CHECK(report.failures.empty());
  REQUIRE(report.kept.size() == 1);
  CHECK(report.kept[0].rank == 0);
  CHECK(report.kept[0].pid == ::getpid());
  CHECK_FALSE(exists("ddstage-" + id + "-r2.lock"));
  CHECK_FALSE(exists("ddstage-" + id + "-train-g1-r2"));
  CHECK_FALSE(fs::exists(queue));
  CHECK(exists("ddstage-" + id + "-r0.lock"));
  CHECK(exists("ddstage-" + id + "-train-g1-r0"));
  REQUIRE(report.unlocked.size() == 1);
  CHECK(report.unlocked[0].rank == 3);
  CHECK(exists(lockless_name));
  CHECK(clean_dead_ranks(id).removed.empty());

  const auto forced = clean_dead_ranks(id, false, true);
  CHECK(removed_names(forced) == std::vector<std::string>{lockless_name});
  CHECK(forced.unlocked.empty());
  CHECK_FALSE(exists(lockless_name));
  CHECK(exists("ddstage-" + id + "-train-g1-r0"));
}

TEST_CASE("clean removes a dead rank's tier files and its record, and nothing else there",
          "[cleanup][tier]") {
  const auto id = cleanup_store_id();
  test::TempDir dir;
  const auto tier = dir / "nvme";
  // A live rank 0 with a tier file in the same directory, and a dead rank 2 that used it.
  RankLock live(id, 0);
  TierSet live_tiers({{.kind = TierSpec::Kind::nvme, .dir = tier}}, 0);
  TierRecord live_record(id, 0, live_tiers);
  auto live_file = ShmSegment::create(test::ForkedRank::tier_file_name(id, 0, tier), 4096);
  { test::ForkedRank forked(id, 2, tier); }
  const auto dead_file = test::ForkedRank::tier_file_name(id, 2, tier);
  const auto dead_record = TierRecord::path_for(id, 2);
  REQUIRE(fs::exists(dead_file));
  REQUIRE(fs::exists(dead_record));
  // Not the dead rank's: another rank's name, a name of no store, and a link by the right name.
  std::ofstream(tier / ("ddstage-" + id + "-train-g2-r22")) << "x";
  std::ofstream(tier / "unrelated-r2") << "x";
  fs::create_symlink(tier / "unrelated-r2", tier / ("ddstage-" + id + "-link-g1-r2"));

  const auto report = clean_dead_ranks(id);
  CHECK(report.failures.empty());
  CHECK(removed_names(report) == std::vector<std::string>{"ddstage-" + id + "-r2.lock",
                                                          "ddstage-" + id + "-r2.tiers",
                                                          "ddstage-" + id + "-train-g1-r2",
                                                          "ddstage-" + id + "-train-g2-r2"});
  CHECK_FALSE(fs::exists(dead_file));
  CHECK_FALSE(fs::exists(dead_record));
  CHECK(fs::exists(live_file.name()));
  CHECK(fs::exists(TierRecord::path_for(id, 0)));
  CHECK(fs::exists(tier / ("ddstage-" + id + "-train-g2-r22")));
  CHECK(fs::is_symlink(tier / ("ddstage-" + id + "-link-g1-r2")));
}

TEST_CASE("a descriptor is removed only while it names the store asked for", "[cleanup]") {
  test::TempDir scratch;
  const auto dir = scratch / "store";
  StoreDescriptor::prepare_directory(dir);
  descriptor_for("0123456789ab", host_name()).write(dir);
  std::error_code ec;
  CHECK_FALSE(remove_descriptor_of(dir, cleanup_store_id(), ec));
  CHECK_FALSE(ec);
  CHECK(fs::exists(StoreDescriptor::path_in(dir)));
  CHECK(remove_descriptor_of(dir, "0123456789ab", ec));
  CHECK_FALSE(fs::exists(StoreDescriptor::path_in(dir)));
  CHECK_FALSE(remove_descriptor_of(dir, "0123456789ab", ec));
  CHECK_FALSE(ec);
}

TEST_CASE("a descriptor whose rank 0 lives in another mount namespace here is kept", "[cleanup]") {
  const auto id = cleanup_store_id();
  test::TempDir scratch;
  const auto dir = scratch / "store";
  StoreDescriptor::prepare_directory(dir);
  auto here = descriptor_for(id, host_name());
  here.write(dir);
  ShmNamespaceRank rank0(id, 0);
  if (!rank0.started()) {
    WARN("cannot unshare a mount namespace here: not tested");
    return;
  }
  here.ranks.front().pid = rank0.pid();
  const auto kept = clean_store_descriptor(dir, here);
  CHECK(kept.outcome == DescriptorCleanup::Outcome::kept);
  CHECK(fs::exists(StoreDescriptor::path_in(dir)));
  rank0.kill();
  CHECK(clean_store_descriptor(dir, here).outcome == DescriptorCleanup::Outcome::removed);
}

TEST_CASE("a descriptor goes only when its rank 0 ran on this host and is gone", "[cleanup]") {
  const auto id = cleanup_store_id();
  test::TempDir scratch;
  const auto dir = scratch / "store";
  StoreDescriptor::prepare_directory(dir);
  const auto here = descriptor_for(id, host_name());
  here.write(dir);
  {
    RankLock rank0(id, 0);
    const auto kept = clean_store_descriptor(dir, here);
    CHECK(kept.outcome == DescriptorCleanup::Outcome::kept);
    CHECK_THAT(kept.message, Catch::Contains("still runs"));
    CHECK(fs::exists(StoreDescriptor::path_in(dir)));
  }
  const auto elsewhere = descriptor_for(id, "node-elsewhere");
  const auto remote = clean_store_descriptor(dir, elsewhere);
  CHECK(remote.outcome == DescriptorCleanup::Outcome::kept);
  CHECK_THAT(remote.message, Catch::Contains("ran on node-elsewhere"));
  CHECK(clean_store_descriptor(dir, here, true).outcome == DescriptorCleanup::Outcome::removed);
  CHECK(fs::exists(StoreDescriptor::path_in(dir)));
  CHECK(clean_store_descriptor(dir, here).outcome == DescriptorCleanup::Outcome::removed);
  CHECK_FALSE(fs::exists(StoreDescriptor::path_in(dir)));
  remove_empty_store_directory(dir);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("wait gives up on a leftover descriptor, and at once when the launcher exits",
          "[cleanup]") {
  test::TempDir scratch;
  const auto dir = scratch / "store";
  StoreDescriptor::prepare_directory(dir);
  try {
    wait_for_store({dir, std::chrono::milliseconds(300)});
    FAIL("wait returned for a directory with no store");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK_THAT(e.what(), Catch::Contains("after 300ms: there is no store.yaml"));
  }
  descriptor_for(cleanup_store_id(), host_name()).write(dir);
  try {
    wait_for_store({dir, std::chrono::milliseconds(500), std::chrono::milliseconds(200)});
    FAIL("wait returned for a store whose control does not answer");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("names control 127.0.0.1:1, which does not answer"));
  }
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      wait_for_store({dir, std::chrono::seconds(60), std::chrono::milliseconds(200), child}),
      Catch::Contains("exited before the store"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}
