// The loop `bench loader` runs: the trainer gets every batch in order whatever the threads and
// prefetch depth, a worker's error ends the loop, and the shuffle covers each epoch once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include "bench/training_loop.hpp"
#include "ddstage/error.hpp"

using namespace ddstage::cli;

namespace {

/// Writes each id as a little-endian uint64: the batch names its ids. Throws on fail_id.
class IdBatches final : public BatchSource {
 public:
  explicit IdBatches(uint64_t fail_id = UINT64_MAX) : m_fail_id(fail_id) {}
  void read(std::span<const uint64_t> ids, std::vector<std::byte>& out) override {
    out.resize(ids.size() * sizeof(uint64_t));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == m_fail_id)
        throw std::runtime_error("cannot read sample " + std::to_string(ids[i]));
      std::memcpy(out.data() + i * sizeof(uint64_t), &ids[i], sizeof(uint64_t));
    }
  }

 private:
  uint64_t m_fail_id;
};

/// Rows whose bytes are not their id.
uint64_t wrong_ids(std::span<const uint64_t> ids, std::span<const std::byte> batch) {
  uint64_t bad = batch.size() != ids.size() * sizeof(uint64_t) ? ids.size() : 0;
  for (std::size_t i = 0; i < ids.size() && !bad; ++i) {
    uint64_t got;
    std::memcpy(&got, batch.data() + i * sizeof(uint64_t), sizeof got);
    bad += got != ids[i];
  }
  return bad;
}

void no_progress(uint64_t, uint64_t, double) {}

}  // namespace

TEST_CASE("training loop: batches arrive in order for any threads and prefetch",
          "[training_loop]") {
  const auto threads = GENERATE(1u, 3u, 8u);
  const auto prefetch = GENERATE(1u, 2u, 5u);
  const auto ids = shuffled_batches(1000, 7, 300, 3);
  const TrainingLoopOptions options{.batch = 7,
                                    .steps = 300,
                                    .compute = std::chrono::nanoseconds(0),
                                    .prefetch = prefetch,
                                    .threads = threads};
  uint64_t last_step = 0;
  const auto r = run_training_loop(
      options, ids, [] { return std::make_unique<IdBatches>(); }, wrong_ids,
      [&](uint64_t done, uint64_t, double) { CHECK(done == ++last_step); });
  REQUIRE(r.epochs.size() == 1);
  const auto& e = r.epochs[0];
  CHECK(e.mismatches == 0);
  CHECK(e.steps == 300);
  CHECK(e.samples == 300 * 7);
  CHECK(e.bytes == 300 * 7 * sizeof(uint64_t));
  CHECK(e.wait_ns.count() == 300);
  CHECK(e.waits_over_long <= e.waits_over_short);
  CHECK(last_step == 300);
}

TEST_CASE("training loop: epochs reported apart, then the rest as one, partial last one included",
          "[training_loop]") {
  // 100 samples in batches of 7: 14 steps an epoch; 50 steps are 3 whole epochs and 8 steps.
  const auto ids = shuffled_batches(100, 7, 50, 2);
  const TrainingLoopOptions options{.batch = 7,
                                    .steps = 50,
                                    .compute = std::chrono::nanoseconds(0),
                                    .prefetch = 2,
                                    .threads = 2,
                                    .per_epoch = 14,
                                    .epochs_apart = 2};
  const auto r = run_training_loop(
      options, ids, [] { return std::make_unique<IdBatches>(); }, wrong_ids, no_progress);
  REQUIRE(r.epochs.size() == 3);
  const std::vector<std::pair<uint64_t, uint64_t>> spans{{1, 1}, {2, 2}, {3, 4}};
  const std::vector<uint64_t> steps{14, 14, 22};
  double seconds = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& e = r.epochs[i];
    CHECK(std::pair(e.first_epoch, e.last_epoch) == spans[i]);
    CHECK(e.steps == steps[i]);
    CHECK(e.wait_ns.count() == steps[i]);
    CHECK(e.samples == steps[i] * 7);
    CHECK(e.mismatches == 0);
    CHECK(e.first_wait * 1e9 <= static_cast<double>(e.wait_ns.max()) + 1);
    seconds += e.seconds;
  }
  CHECK(seconds <= r.seconds);
}

TEST_CASE("training loop: a worker's error ends the loop and reaches the trainer",
          "[training_loop]") {
  const auto ids = shuffled_batches(100, 5, 40, 1);
  const TrainingLoopOptions options{
      .batch = 5, .steps = 40, .compute = std::chrono::nanoseconds(0), .prefetch = 3, .threads = 3};
  const uint64_t victim = ids[5 * 30 + 2];
  CHECK_THROWS_WITH(run_training_loop(
                        options, ids, [&] { return std::make_unique<IdBatches>(victim); },
                        wrong_ids, no_progress),
                    "cannot read sample " + std::to_string(victim));
}

TEST_CASE("shuffle: each epoch is a seeded permutation, full batches only", "[training_loop]") {
  // 10 samples, batch 3: 3 batches an epoch, the 10th sample of each epoch's order dropped.
  const auto ids = shuffled_batches(10, 3, 7, 42);
  REQUIRE(ids.size() == 21);
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    std::set<uint64_t> seen(ids.begin() + epoch * 9, ids.begin() + (epoch + 1) * 9);
    CHECK(seen.size() == 9);
    CHECK(*seen.rbegin() < 10);
  }
  CHECK(!std::equal(ids.begin(), ids.begin() + 9, ids.begin() + 9));  // epochs differ
  CHECK(shuffled_batches(10, 3, 7, 42) == ids);
  CHECK(shuffled_batches(10, 3, 7, 43) != ids);
  CHECK_THROWS_AS(shuffled_batches(10, 11, 1, 1), ddstage::UsageError);
  CHECK_THROWS_AS(shuffled_batches(10, 0, 1, 1), ddstage::UsageError);
}
