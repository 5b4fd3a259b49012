// Re-reading every entry of an index from origin and checking its checksum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/index_writer.hpp"

namespace ddstage {

struct VerifyOptions {
  unsigned threads = 1;
  bool allow_stale = false;
  /// Mismatches kept in the report (all are counted).
  std::size_t max_reported = 20;
  ProgressFn progress;
};

/// One entry that failed: a checksum mismatch, or an error reading it.
struct VerifyFailure {
  uint64_t sample;
  std::string field;
  std::string reason;
};

struct VerifyReport {
  uint64_t entries_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t failures = 0;
  std::vector<VerifyFailure> first_failures;  ///< sorted by sample, at most max_reported
};

/// Reads every (sample, field) with `threads` threads, each with its own OriginReader over a
/// contiguous range of samples, and compares xxh3-64 checksums. Never throws for a bad entry;
/// a stale source throws StaleError unless allow_stale.
VerifyReport verify_origin(const Index& index, const VerifyOptions& options);

}  // namespace ddstage
