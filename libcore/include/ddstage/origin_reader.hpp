// Reads samples straight from the origin files through an Index: one pread per entry.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "ddstage/file_descriptor.hpp"
#include "ddstage/index.hpp"

namespace ddstage {

struct OriginReaderOptions {
  bool verify = false;       ///< compare each entry's xxh3-64 with the index
  bool allow_stale = false;  ///< skip the size/mtime check when a file is first opened
};

/// Per-thread reader of origin files. Caches one fd per file and checks each file's freshness
/// the first time it opens it, so a batch touching few files of a million-file dataset stats
/// only those. Not thread-safe: give each thread its own (they share the Index).
class OriginReader {
 public:
  OriginReader(const Index& index, OriginReaderOptions options = {});

  /// Total bytes of field `field` for ids (repeats counted). Throws UsageError for a bad id.
  uint64_t batch_bytes(uint32_t field, std::span<const uint64_t> ids) const;
  /// Reads the rows of ids into dest, concatenated in the order asked. Within the batch the
  /// preads are issued sorted by (file, offset). dest.size() must equal batch_bytes().
  void read(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest);
  /// Reads one entry into dest (sized entry.length) and returns whether its checksum matches.
  bool read_and_check(uint64_t sample, uint32_t field, std::span<std::byte> dest);

 private:
  const FileDescriptor& fd_for(uint32_t file);
  void check_ids(std::span<const uint64_t> ids) const;

  const Index* m_index;
  OriginReaderOptions m_options;
  std::unordered_map<uint32_t, FileDescriptor> m_fds;
  std::vector<uint32_t> m_order;  // reused across batches: no allocation per call
  std::vector<uint64_t> m_dest_offsets;
};

}  // namespace ddstage
