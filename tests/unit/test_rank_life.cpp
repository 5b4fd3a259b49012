// A server rank's life without MPI: its way out (in a child process, which it ends), rank 0's
// watch over heartbeats, and a rank's heartbeat to a real control socket.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/control_messages.hpp"
#include "control/control_server.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/tier_set.hpp"
#include "heartbeat.hpp"
#include "peer_watch.hpp"
#include "rank_exit.hpp"

using namespace ddstage;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// A store id no real store has: 12 hex digits from this test process's pid.
std::string test_store_id() {
  char id[13];
  std::snprintf(id, sizeof id, "%012x", static_cast<unsigned>(::getpid()) * 16u + 0xd);
  return id;
}

fs::path shm(const std::string& name) {
  return detail::shm_directory() / name;
}

/// Waits for child; its exit code, or -1 when it did not exit normally.
int exit_code_of(pid_t child) {
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("leaving frees the rank's segments, the one being filled, its lock and dead peers' files",
          "[rank_exit]") {
  const auto id = test_store_id();
  const auto loaded = "/ddstage-" + id + "-a-g1-r0";
  const auto filling = "/ddstage-" + id + "-b-g2-r0";
  const auto untracked = "/ddstage-" + id + "-c-g3-r0";
  // What a rank 3 that was SIGKILLed on this node leaves: a lock file nobody holds, a segment.
  std::ofstream(shm(detail::RankLock::file_name(id, 3))) << "1\n";
  const auto dead_segment = "/ddstage-" + id + "-a-g1-r3";
  auto dead_memory = ShmSegment::create(dead_segment, 4096);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    detail::RankExit exit;
    exit.claim(id, 0, {});
    auto tracked = exit.track(loaded);
    auto memory = ShmSegment::create(loaded, 4096);
    auto being_filled = exit.track(filling);  // as a load does: tracked, then created
    auto partial = ShmSegment::create(filling, 4096);
    auto other = ShmSegment::create(untracked, 4096);
    {
      auto gone = exit.track(untracked);  // tracked and forgotten again: not this rank's to free
    }
    exit.leave(7);
  }
  REQUIRE(exit_code_of(child) == 7);
  CHECK_FALSE(fs::exists(shm(loaded.substr(1))));
  CHECK_FALSE(fs::exists(shm(filling.substr(1))));
  CHECK_FALSE(fs::exists(shm(detail::RankLock::file_name(id, 0))));
  CHECK_FALSE(fs::exists(shm(detail::RankLock::file_name(id, 3))));
  CHECK_FALSE(fs::exists(shm(dead_segment.substr(1))));
  // Never tracked while the rank left: it stays (the test removes it).
  CHECK(fs::exists(shm(untracked.substr(1))));
  ::shm_unlink(untracked.c_str());
  dead_memory.unlink();
  fs::remove(shm(detail::RankLock::file_name(id, 3)));
}

TEST_CASE("leaving frees the rank's tier files and tier record too", "[rank_exit][tier]") {
  const auto id = test_store_id();
  const auto dir = fs::temp_directory_path() / ("ddstage-rank-exit-tier-" + id);
  fs::remove_all(dir);
  const auto file = (dir / ("ddstage-" + id + "-a-g1-r0")).string();
  const auto record = TierRecord::path_for(id, 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    detail::RankExit exit;
    exit.claim(id, 0, {});
    TierSet tiers({{.kind = TierSpec::Kind::nvme, .dir = dir}}, 0);
    auto tracked_record = exit.track(record.string());
    TierRecord written(id, 0, tiers);
    auto tracked = exit.track(file);
    auto region = ShmSegment::create(file, 4096);
    exit.leave(5);
  }
  REQUIRE(exit_code_of(child) == 5);
  CHECK_FALSE(fs::exists(file));
  CHECK_FALSE(fs::exists(record));
  CHECK(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST_CASE("leaving removes store.yaml only while it names this store", "[rank_exit]") {
  const auto id = test_store_id();
  const auto dir = fs::temp_directory_path() / ("ddstage-rank-exit-" + id);
  StoreDescriptor::prepare_directory(dir);
  const auto descriptor = StoreDescriptor::path_in(dir);
  for (const std::string& written_id : {id, std::string("0123456789ab")}) {
    StoreDescriptor written;
    written.id = written_id;
    written.token = random_token();
    written.control = "127.0.0.1:1";
    written.ranks.push_back(RankInfo{0, "node", 1, {"local", "shm"}, 1024});
    written.write(dir);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      detail::RankExit exit;
      exit.claim(id, 0, dir);
      exit.leave(0);
    }
    REQUIRE(exit_code_of(child) == 0);
    CHECK(fs::exists(descriptor) == (written_id != id));
  }
  fs::remove_all(dir);
}

TEST_CASE("rank 0's watch names the rank that went silent, and only once watching",
          "[peer_watch]") {
  std::atomic<int> lost{-1};
  std::atomic<long> silence_ms{0};
  detail::PeerWatch watch(3, 400ms, [&](int rank, std::chrono::milliseconds silence) {
    silence_ms = silence.count();
    lost = rank;
  });
  std::this_thread::sleep_for(600ms);  // before watch(): start-up time is no silence
  REQUIRE(lost == -1);
  watch.watch();
  REQUIRE_FALSE(watch.heard(0));
  REQUIRE_FALSE(watch.heard(3));
  const auto t0 = std::chrono::steady_clock::now();
  while (lost == -1 && std::chrono::steady_clock::now() - t0 < 10s) {
    REQUIRE(watch.heard(1));
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(lost == 2);
  REQUIRE(silence_ms >= 400);
  const auto silence = watch.silence_seconds();
  REQUIRE(silence.size() == 3);
  REQUIRE(silence[0] == 0.0);
  REQUIRE(silence[1] < silence[2]);
  // Reported once, then forgotten: never silent again, never heard again.
  REQUIRE(watch.silent_for(300ms).empty());
  REQUIRE_FALSE(watch.heard(2));
}

TEST_CASE("heartbeats keep a rank quiet while rank 0 answers, and report it gone once it does not",
          "[heartbeat]") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  std::optional<detail::ControlServer> rank0;
  rank0.emplace("127.0.0.1:0", token,
                [](const detail::Message& request, bool) -> std::optional<detail::Message> {
                  detail::Message reply;
                  reply["ok"] = request["op"].as<std::string>() == "heartbeat" &&
                                request["rank"].as<int>() == 1;
                  return reply;
                });
  std::atomic<bool> lost{false};
  detail::Heartbeat beat(
      rank0->address(), token, 1, 1000ms,
      [&](std::chrono::milliseconds, const std::optional<std::string>&) { lost = true; });
  std::this_thread::sleep_for(2500ms);
  REQUIRE_FALSE(lost);
  rank0.reset();
  const auto t0 = std::chrono::steady_clock::now();
  while (!lost && std::chrono::steady_clock::now() - t0 < 15s) std::this_thread::sleep_for(20ms);
  REQUIRE(lost);
}

TEST_CASE("rank 0's watch goes on after a lost rank, and a forgotten rank is never heard again",
          "[peer_watch]") {
  std::mutex mutex;
  std::vector<int> lost;
  detail::PeerWatch watch(4, 300ms, [&](int rank, std::chrono::milliseconds) {
    std::lock_guard lock(mutex);
    lost.push_back(rank);
  });
  watch.watch();
  watch.forget(3);  // lost otherwise (a command it did not answer): no second report
  REQUIRE_FALSE(watch.heard(3));
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard lock(mutex);
      if (lost.size() >= 2 || std::chrono::steady_clock::now() - t0 > 10s) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  std::this_thread::sleep_for(400ms);  // a third report would come by now
  std::lock_guard lock(mutex);
  std::sort(lost.begin(), lost.end());
  REQUIRE(lost == std::vector<int>{1, 2});
  REQUIRE_FALSE(watch.heard(1));
  REQUIRE(watch.silent_for(0ms).empty());
}

TEST_CASE("a refused heartbeat reports the rank lost at once, with rank 0's words", "[heartbeat]") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  detail::ControlServer rank0("127.0.0.1:0", token, [](const detail::Message&, bool) {
    return std::optional(detail::error_reply({.text = "heartbeat from no live rank"}));
  });
  std::mutex mutex;
  std::optional<std::string> refusal;
  std::atomic<bool> lost{false};
  const auto t0 = std::chrono::steady_clock::now();
  detail::Heartbeat beat(rank0.address(), token, 1, 30s,
                         [&](std::chrono::milliseconds, const std::optional<std::string>& why) {
                           std::lock_guard lock(mutex);
                           refusal = why;
                           lost = true;
                         });
  while (!lost && std::chrono::steady_clock::now() - t0 < 20s) std::this_thread::sleep_for(20ms);
  REQUIRE(lost);  // within 20 s of a 30 s peer_timeout: the refusal, not the silence
  std::lock_guard lock(mutex);
  REQUIRE(refusal == std::optional<std::string>("heartbeat from no live rank"));
}
