// The read profile's collection: per-thread records merged into one report, threads that end
// keep their figures, marks made by nested code land in the running batch.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "batch_timer.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/settings.hpp"

using namespace ddstage;

namespace {

void one_batch(uint64_t rows, bool nested_registration) {
  detail::BatchTimer timer;
  timer.mark(ProfileStage::other);
  timer.path("fabric");
  if (nested_registration) detail::profile_mark(ProfileStage::registration);
  timer.mark(ProfileStage::post);
  timer.path("fabric");  // a path named twice counts once per batch
  timer.finish(rows, rows * 10);
}

const LatencyHistogram& stage(const ProfileReport& r, ProfileStage s) {
  return r.stage_ns[static_cast<std::size_t>(s)];
}

}  // namespace

TEST_CASE("profile: threads' batches merge, ended threads included, reset forgets", "[profile]") {
  profile::reset();
  profile::enable();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 50; ++i) one_batch(static_cast<uint64_t>(t + 1), i % 2 == 0);
    });
  }
  for (auto& t : threads) t.join();
  profile::add(ProfileStage::queue_wait, 1234);
  profile::enable(false);
  one_batch(1000, false);  // off: not counted

  const ProfileReport r = profile::snapshot();
  CHECK(r.batches == 200);
  CHECK(r.rows == 50 * (1 + 2 + 3 + 4));
  CHECK(r.bytes == r.rows * 10);
  CHECK(stage(r, ProfileStage::registration).count() == 100);
  CHECK(stage(r, ProfileStage::post).count() == 200);
  CHECK(stage(r, ProfileStage::queue_wait).count() == 1);
  CHECK(stage(r, ProfileStage::queue_wait).sum() == 1234);
  CHECK(stage(r, ProfileStage::copy).count() == 0);
  REQUIRE(r.paths.size() == 1);
  CHECK(r.paths[0].second == 200);
  CHECK(r.batch_ns.percentile(0.5) <= r.batch_ns.percentile(0.99));

  profile::reset();
  CHECK(profile::snapshot().batches == 0);
  CHECK(profile::format(profile::snapshot()) == "no batches read\n");
}

TEST_CASE("profile: the setting's off values change nothing, stage names are stable", "[profile]") {
  profile::enable(false);
  for (const char* off : {"", "0", "false", "no", "off"}) profile::configure(off);
  CHECK_FALSE(profile::enabled());
  CHECK(stage_name(ProfileStage::completion_wait) == "completion_wait");
  CHECK(stage_name(ProfileStage::gpu_sync) == "gpu_sync");
}

TEST_CASE("profile: libcore reads no DDSTAGE_PROFILE itself; the caller's settings carry it",
          "[profile]") {
  ::setenv("DDSTAGE_PROFILE", "1", 1);
  const bool enabled_by_environment = profile::enabled();
  const auto settings = Settings::resolve({}, environment_settings(), std::nullopt, false);
  ::unsetenv("DDSTAGE_PROFILE");
  CHECK_FALSE(enabled_by_environment);
  CHECK(settings.get_string("profile") == "1");
}
