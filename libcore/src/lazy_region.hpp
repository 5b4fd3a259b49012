// A shard region staged on first touch (`load --lazy`): created empty, filled from origin by
// its owner rank as readers ask for samples, and kept for later reads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <stop_token>
#include <thread>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"

namespace ddstage {

struct LazyRegionOptions {
  bool allow_stale = false;  ///< skip the source size/mtime check before each origin read
  /// Check the checksums of what is read before it counts as staged (a mismatch stages nothing).
  bool verify = false;
  /// Entry bytes the prefetch claims at a time: a stage() of a sample in a chunk being
  /// prefetched waits for that chunk, so this bounds the wait it adds to a first touch.
  uint64_t prefetch_chunk_bytes = 4ull << 20;
};

/// The owner's side of a lazily staged region: which samples are in it, and the one way they
/// get there. Samples are fetched in units: the smallest runs of samples that no checksum
/// block of any field straddles (one sample when every row is checksummed on its own), so that
/// a unit can be verified on its own and is fetched from origin at most once, whoever asks for
/// it first (concurrent stage() calls and the prefetch share one claim table). Readers may
/// read a sample's rows from the region (mapped or one-sided) only once stage() returned for
/// it, here or in the owner's answer to a stage request. Thread-safe.
class LazyRegion {
 public:
  /// Writes layout's tables into region (at least layout.total_bytes(), zero or not: the rows
  /// are written before they are read) and stages nothing yet. region must outlive this.
  LazyRegion(const Index& index, ShardLayout layout, std::span<std::byte> region,
             LazyRegionOptions options = {});
  /// Stops the prefetch and waits for it; a stage() still running in another thread is the
  /// caller's to finish first.
  ~LazyRegion();
  LazyRegion(const LazyRegion&) = delete;
  LazyRegion& operator=(const LazyRegion&) = delete;

  /// Returns once every sample of ids (any order, repeats allowed) is in the region: units not
  /// staged nor being staged are read from origin by this call (after checking their source
  /// files' size and mtime, unless allow_stale), those another call is staging are waited for.
  /// UsageError for an id outside the layout's range, StaleError naming a changed source,
  /// ChecksumError (verify), IoError: the units that failed are then left unstaged, to be
  /// tried again by the next call that needs them.
  void stage(std::span<const uint64_t> ids);

  /// Samples staged so far.
  uint64_t staged() const noexcept { return m_staged_count.load(std::memory_order_acquire); }
  /// Samples read from origin so far (a unit whose read succeeded but whose checksum or a
  /// later read failed counts too): staged() when nothing was fetched twice or in vain.
  uint64_t origin_reads() const noexcept { return m_origin_reads.load(std::memory_order_relaxed); }
  /// Whether every sample of the range is staged.
  bool complete() const noexcept { return staged() == m_layout.range().count(); }
  const ShardLayout& layout() const noexcept { return m_layout; }

  // The prefetch is the owner's to start, stop and wait for, from one thread at a time.

  /// Starts filling what is not staged yet, in sample order, on a thread of its own, a chunk
  /// at a time; units a stage() holds are left to it. Does nothing while a prefetch started
  /// earlier has not been stopped or waited for.
  void start_prefetch();
  /// Stops the prefetch after its current chunk and waits for it; its error, if any, is
  /// dropped (stage() meets it again where it matters).
  void stop_prefetch() noexcept;
  /// Waits for the prefetch to end and rethrows the error that ended it (it stops at the
  /// first). Returns at once when none runs.
  void wait_prefetch();

 private:
  /// The unit holding sample (see the class comment), clipped to the range.
  ShardRange unit_of(uint64_t sample) const noexcept;
  /// Claims unit for the caller; m_mutex held, the unit neither staged nor claimed.
  void claim(ShardRange unit);
  /// Reads the caller's claimed units from origin and marks them staged, or releases them and
  /// rethrows. Called without m_mutex.
  void fill_claimed(std::span<const ShardRange> units);
  /// Origin into the region for units: the freshness check, the reads, the verify.
  void fill(std::span<const ShardRange> units);
  /// StaleError for the first source file of units that changed since flatten.
  void check_sources(std::span<const ShardRange> units) const;
  void prefetch(const std::stop_token& stop);
  std::size_t slot(uint64_t sample) const noexcept { return sample - m_layout.range().first; }

  const Index* m_index;
  ShardLayout m_layout;
  std::span<std::byte> m_region;
  LazyRegionOptions m_options;

  std::mutex m_mutex;
  std::condition_variable m_changed;  ///< a claim ended: staged or released
  std::vector<bool> m_staged;         ///< by sample of the range
  std::vector<bool> m_claimed;        ///< being fetched by some call (by sample)
  std::atomic<uint64_t> m_staged_count{0};
  std::atomic<uint64_t> m_origin_reads{0};
  std::exception_ptr m_prefetch_error;
  std::jthread m_prefetch;  // last: stopped and joined before what it uses goes
};

}  // namespace ddstage
