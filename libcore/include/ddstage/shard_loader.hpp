// Filling a shard region from the origin files.
#pragma once

#include <functional>
#include <string>

#include "ddstage/index.hpp"
#include "ddstage/shard_plan.hpp"
#include "ddstage/shm_segment.hpp"

namespace ddstage {

struct ShardLoadOptions {
  bool verify = false;       ///< check every entry's checksum
  bool allow_stale = false;  ///< skip the source size/mtime check
  /// Called after each chunk with bytes loaded so far (for progress).
  std::function<void(uint64_t bytes)> progress;
};

/// Creates shared-memory segment `segment` holding samples `range` of index in the ShardLayout
/// and fills it from origin with large preads (entries adjacent in a file are read at once).
/// On any failure the segment is removed and the error propagates (naming file or sample).
ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options = {});

}  // namespace ddstage
