// Filling a shard region from the origin files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/shm_segment.hpp"

namespace ddstage {

class OriginReader;

/// Most streams one load may run: each is a thread with its own open files and scratch buffer.
inline constexpr unsigned max_load_streams = 64;

struct ShardLoadOptions {
  /// Check every block once the shard is loaded: rows in the shard hashed from the region,
  /// those of a block straddling its edge read from origin.
  bool verify = false;
  bool allow_stale = false;  ///< skip the source size/mtime check
  /// Reader threads, each with its own large preads in flight (1 to max_load_streams).
  unsigned streams = 4;
  /// Bytes a stream takes at a time (at least one sample): the granularity of load balancing
  /// between streams and of stopping them after an error.
  uint64_t chunk_bytes = 16ull << 20;
  /// Called with the entry bytes loaded so far and the shard's total entry bytes, after each
  /// chunk. Calls come from the reader threads but never overlap; keep it cheap, it holds the
  /// streams that finish meanwhile.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

/// UsageError unless 1 <= streams <= max_load_streams: a request can be refused before any
/// rank starts loading.
void check_load_streams(unsigned streams);

/// Fills region (at least layout.total_bytes() long, from whichever allocator exposes it: a
/// shared-memory segment, an MPI window) with layout's tables and its samples' rows, read from
/// origin by options.streams threads, each over its own byte-balanced chunks of samples with
/// large preads (entries adjacent in a file are read at once, up to 8 MiB). The first error
/// of any stream stops the others and propagates naming file or sample; the region is then
/// partly filled and must not be published. UsageError for a streams count out of range.
void fill_shard(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                const ShardLoadOptions& options = {});

/// Checks the rows of region (filled per layout) against the index's checksums: every field's
/// blocks that start in `rows` (a part of layout's range), and when rows starts the range, the
/// block it starts inside of. Rows of a block outside the range are read from origin through
/// reader; bytes is scratch. The in-range rows of those blocks, also past rows.last, must be in
/// region already. ChecksumError naming the file and the block.
void verify_shard_rows(const Index& index, const ShardLayout& layout, const std::byte* region,
                       ShardRange rows, OriginReader& reader, std::vector<std::byte>& bytes);

/// Creates shared-memory segment `segment` holding samples `range` of index in the ShardLayout
/// and fills it as fill_shard does, but writes long runs of rows through the segment's file
/// (splice: no page fault or zero-fill per page of the mapping). On any failure the segment is
/// removed and the error propagates (naming file or sample). `segment` may name a tier file
/// (ShmSegment::is_file): each chunk's pages then leave this process's mapping once written,
/// and their writeback starts, so a file larger than memory fills in bounded memory (about
/// streams x chunk_bytes mapped at a time).
ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options = {});
/// The same into `created`, a segment of the ShardLayout's size just created (its creator chose
/// the name); removed on failure as above.
ShmSegment load_shard(const Index& index, ShardRange range, ShmSegment created,
                      const ShardLoadOptions& options = {});

}  // namespace ddstage
