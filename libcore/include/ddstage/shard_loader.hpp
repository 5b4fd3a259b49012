// Filling a shard region from the origin files.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "ddstage/index.hpp"
#include "ddstage/shard_layout.hpp"
#include "ddstage/shard_plan.hpp"
#include "ddstage/shm_segment.hpp"

namespace ddstage {

struct ShardLoadOptions {
  bool verify = false;       ///< check every entry's checksum
  bool allow_stale = false;  ///< skip the source size/mtime check
  /// Called after each chunk with bytes loaded so far (for progress).
  std::function<void(uint64_t bytes)> progress;
};

/// Fills region (at least layout.total_bytes() long, from whichever allocator exposes it: a
/// shared-memory segment, an MPI window) with layout's tables and its samples' rows, read from
/// origin with large preads (entries adjacent in a file are read at once). Errors propagate
/// naming file or sample; the region is then partly filled and must not be published.
void fill_shard(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                const ShardLoadOptions& options = {});

/// Creates shared-memory segment `segment` holding samples `range` of index in the ShardLayout
/// and fills it from origin with large preads (entries adjacent in a file are read at once).
/// On any failure the segment is removed and the error propagates (naming file or sample).
ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options = {});

}  // namespace ddstage
