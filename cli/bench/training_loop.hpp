// The training loop `ddstage bench loader` simulates: a trainer that takes the next batch from
// a prefetching loader, then computes for a fixed time, while worker threads read ahead.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ddstage/latency_histogram.hpp"

namespace ddstage::cli {

/// Where a loader's batches come from; one per worker thread, created on that thread.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Reads the batch of ids into out (resized to fit), in the layout the caller's check expects.
  virtual void read(std::span<const uint64_t> ids, std::vector<std::byte>& out) = 0;
};

/// Creates the calling worker thread's BatchSource.
using BatchSourceFactory = std::function<std::unique_ptr<BatchSource>()>;
/// Checks a batch's bytes during the compute window; returns the rows that do not match.
using BatchCheck =
    std::function<uint64_t(std::span<const uint64_t> ids, std::span<const std::byte> batch)>;
/// Told the steps done and the seconds since the loop started, after every step.
using StepProgress = std::function<void(uint64_t steps_done, uint64_t bytes_done, double seconds)>;

struct TrainingLoopOptions {
  uint64_t batch = 64;
  uint64_t steps = 2000;
  std::chrono::nanoseconds compute{std::chrono::milliseconds(150)};
  unsigned prefetch = 4;      ///< batches read ahead of the one the trainer holds
  unsigned threads = 2;       ///< worker threads, each with its own BatchSource
  uint64_t per_epoch = 0;     ///< steps in an epoch; 0: all steps are one epoch
  unsigned epochs_apart = 2;  ///< epochs reported one by one; those after together, as one
};

/// Steps longer than these count as stalls (the seed paper's thresholds).
inline constexpr std::chrono::nanoseconds stall_short = std::chrono::milliseconds(100);
inline constexpr std::chrono::nanoseconds stall_long = std::chrono::seconds(1);

/// What the trainer saw in an epoch, or in the epochs after epochs_apart together.
struct EpochResult {
  uint64_t first_epoch = 1;  ///< 1-based
  uint64_t last_epoch = 1;
  uint64_t steps = 0;
  uint64_t samples = 0;
  uint64_t bytes = 0;
  /// From the trainer asking for the epoch's first batch to the end of its last step's compute
  /// (the first epoch's from the loop's start: the loader's start-up counts).
  double seconds = 0;
  double first_wait = 0;          ///< seconds the trainer waited for the epoch's first batch
  LatencyHistogram wait_ns;       ///< per step: from asking for the batch to holding it
  uint64_t waits_over_short = 0;  ///< steps that waited longer than stall_short
  uint64_t waits_over_long = 0;   ///< steps that waited longer than stall_long
  uint64_t mismatches = 0;        ///< rows whose bytes failed the check
};

/// What the trainer saw, epoch by epoch (the first epochs_apart, then the rest as one).
struct TrainingLoopResult {
  std::vector<EpochResult> epochs;
  double seconds = 0;  ///< wall time of the whole loop, compute included
};

/// The sample ids of `steps` batches: a seeded permutation of all samples per epoch (global
/// shuffle), as many epochs as the steps need, full batches only (an epoch's last partial
/// batch is dropped, as drop_last does). UsageError when batch exceeds the samples.
std::vector<uint64_t> shuffled_batches(uint64_t samples, uint64_t batch, uint64_t steps,
                                       uint64_t seed);

/// Runs the loop over ids (steps x batch): per step, wait for batch i from the loader, check
/// it (counted in its epoch), sleep until the compute time since the batch arrived is over.
/// Sleeping stands in for GPU compute, which does not take the cores the loader runs on. The first
/// error of a worker ends the loop and is rethrown here.
TrainingLoopResult run_training_loop(const TrainingLoopOptions& options,
                                     std::span<const uint64_t> ids,
                                     const BatchSourceFactory& sources, const BatchCheck& check,
                                     const StepProgress& progress);

}  // namespace ddstage::cli
