// Where get_batch's time goes, per stage, for apps and benches tuning a job. Off by default;
// on, it costs two clock reads per stage per batch (never per row).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddstage/latency_histogram.hpp"

namespace ddstage {

/// The stages a batch passes through. Each batch's time is split between them: a stage's
/// figure is the time from the end of the previous stage to its own end.
enum class ProfileStage : uint8_t {
  queue_wait,       ///< a lock around a shared reader, or a full fabric window/byte cap
  registration,     ///< memory registration of the destination (FI_MR_LOCAL, FI_HMEM)
  post,             ///< issuing reads: fi_read, MPI_Get
  completion_wait,  ///< waiting for posted reads: CQ, MPI flush, a collective exchange
  copy,             ///< memcpy from shared memory (same node) into the destination
  gpu_sync,         ///< host-to-device copy and the one event wait per batch
  other,            ///< id checks, planning, verify
};
inline constexpr std::size_t profile_stage_count = 7;

/// "queue_wait", "registration", ...
std::string_view stage_name(ProfileStage stage) noexcept;

/// Totals over every thread's batches since the last reset.
struct ProfileReport {
  uint64_t batches = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;
  /// Nanoseconds of whole get_batch calls.
  LatencyHistogram batch_ns;
  /// Nanoseconds per batch spent in each stage, over the batches that entered it.
  std::array<LatencyHistogram, profile_stage_count> stage_ns{};
  /// How batches were served ("shm", "mpi", "fabric", "gpu staged", ...) and how many
  /// batches each path served: a batch may take several.
  std::vector<std::pair<std::string, uint64_t>> paths;
};

namespace profile {

/// Switches collection on or off for the whole process. It starts off; configure() (which
/// Client and Store call with their settings' `profile`) switches it on.
void enable(bool on = true) noexcept;
bool enabled() noexcept;
/// The merged report of all threads, including threads that have ended.
ProfileReport snapshot();
/// Forgets everything collected so far.
void reset();
/// A table of the report: one line per stage with total seconds, share of get_batch time,
/// mean, p50, p99 and max microseconds per batch.
std::string format(const ProfileReport& report);
/// Adds time a caller measured outside get_batch to a stage of this thread's figures (a
/// lock the caller takes around a shared reader).
void add(ProfileStage stage, uint64_t ns) noexcept;
/// The `profile` setting (DDSTAGE_PROFILE): empty, "0", "false", "no" or "off" change nothing;
/// any other value switches the profile on and prints the report at process exit, to stderr
/// for "1", "true", "yes" or "on", else appended to the file named ("%p" is replaced by the
/// pid and "%h" by the host, for one file per rank). Client and Store apply their settings'.
void configure(std::string_view value);

}  // namespace profile
}  // namespace ddstage
