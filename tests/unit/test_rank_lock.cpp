#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>

#include <catch2/catch.hpp>

#include "ddstage/tool/shm_segment.hpp"
#include "forked_rank.hpp"
#include "rank_lock.hpp"
#include "shm_namespace_rank.hpp"
#include "test_support.hpp"

using namespace ddstage;
using namespace ddstage::detail;
using ddstage::test::ShmNamespaceRank;

namespace {

std::string rank_lock_id() {
  return test::unused_store_id("f0");
}

bool listed(const std::string& id, int rank, bool is_lock) {
  auto files = list_store_files();
  return std::any_of(files.begin(), files.end(), [&](const StoreFile& f) {
    return f.store_id == id && f.rank == rank && f.is_lock == is_lock;
  });
}

}  // namespace

TEST_CASE("a rank lock is live while held, absent once released") {
  const auto id = rank_lock_id();
  {
    RankLock lock(id, 3);
    CHECK(rank_presence(id, 3) == RankPresence::live);
    CHECK(rank_lock_holder(id, 3) == ::getpid());
    CHECK(listed(id, 3, true));
    CHECK(rank_presence(id, 4) == RankPresence::absent);
  }
  CHECK(rank_presence(id, 3) == RankPresence::absent);
  CHECK_FALSE(listed(id, 3, true));
}

TEST_CASE("a killed rank's lock is gone, its segments listed, its pid recorded") {
  const auto id = rank_lock_id();
  const std::string segment = test::ForkedRank::segment_name(id, 2);
  test::ForkedRank rank(id, 2);
  const pid_t child = rank.pid();
  CHECK(rank_presence(id, 2) == RankPresence::live);
  CHECK(rank_lock_holder(id, 2) == child);
  CHECK_FALSE(rank_gone_here(id, 2, child));
  rank.kill();
  CHECK(rank_presence(id, 2) == RankPresence::gone);
  CHECK(rank_gone_here(id, 2, child));
  CHECK(rank_lock_holder(id, 2) == 0);
  const auto lock_path = shm_directory() / RankLock::file_name(id, 2);
  CHECK(recorded_pid(lock_path) == child);
  CHECK(listed(id, 2, true));
  CHECK(listed(id, 2, false));
  std::filesystem::remove(lock_path);
  ::shm_unlink(segment.c_str());
}

TEST_CASE(
    "a rank in another mount namespace here is not gone, one with no lock and a dead pid is") {
  const auto id = rank_lock_id();
  ShmNamespaceRank rank(id, 5);
  if (!rank.started()) {
    WARN("cannot unshare a mount namespace here: not tested");
    return;
  }
  CHECK(rank_presence(id, 5) == RankPresence::absent);
  CHECK_FALSE(rank_gone_here(id, 5, rank.pid()));
  // A live pid whose /dev/shm has no such lock (this process) is not the rank.
  CHECK(rank_gone_here(id, 5, ::getpid()));
  const auto pid = rank.pid();
  rank.kill();
  CHECK(rank_gone_here(id, 5, pid));
  CHECK(rank_gone_here(id, 5, 0));
}

TEST_CASE("names that are not a store's are not listed") {
  for (const char* name :
       {"ddstage-notanid00000-x-r1", "ddstage-0123456789ab-x-rq", "other-0123456789ab-r1.lock"}) {
    std::ofstream(shm_directory() / name) << "x";
  }
  auto files = list_store_files();
  CHECK(std::none_of(files.begin(), files.end(),
                     [](const StoreFile& f) { return f.store_id == "0123456789ab"; }));
  for (const char* name :
       {"ddstage-notanid00000-x-r1", "ddstage-0123456789ab-x-rq", "other-0123456789ab-r1.lock"}) {
    std::filesystem::remove(shm_directory() / name);
  }
}
