// Streams fixed-size records (rows, whole files) out of a source file with bounded memory, and
// hands them to an IndexWriter in place or packed: what every in-place format has in common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/index_writer.hpp"

namespace ddstage::formats {

/// Reads consecutive records of a file in blocks of whole records no larger than a memory budget,
/// reusing one buffer across calls. Ranges of 1 MiB or more (and records larger than the
/// budget) are served from a read-only mapping of the file instead: no copy, and memory stays
/// bounded by the page cache however big a file or row is.
class BlockReader {
 public:
  /// Called once per record, in order; `bytes` is valid only during the call.
  using RecordFn = std::function<void(uint64_t record, std::span<const std::byte> bytes)>;
  /// Called for consecutive records first..first+count-1 held back to back in `bytes`, in
  /// order; `bytes` is valid only during the call.
  using BlockFn =
      std::function<void(uint64_t first, uint64_t count, std::span<const std::byte> bytes)>;

  explicit BlockReader(uint64_t memory_budget);

  /// Calls fn for records 0..count-1, record i being the record_bytes bytes at
  /// offset + i * record_bytes of fd. Throws IoError/Error if the file is shorter than that.
  void for_each_record(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                       uint64_t count, const RecordFn& fn);
  /// The same records, handed over as few large blocks as the budget allows (record_bytes > 0).
  void for_each_block(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                      uint64_t count, const BlockFn& fn);

 private:
  void read_blocks(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes, uint64_t count,
                   const BlockFn& fn);
  void read_mapped(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes, uint64_t count,
                   const BlockFn& fn);

  uint64_t m_budget;
  std::vector<std::byte> m_buffer;
};

/// A run of equally sized records of one file that become consecutive samples of one field.
struct RecordRange {
  uint32_t field = 0;
  uint64_t first_sample = 0;
  uint64_t offset = 0;  ///< of the first record in the file
  uint64_t record_bytes = 0;
  uint64_t count = 0;
};

/// Puts every record of `range` into the writer (checksummed by it): referenced in place in
/// `in_place_file` (an id from writer.add_source for fd's file), a block of rows per call so a
/// billion small rows cost no billion calls, or copied into pack files when that is nullopt.
void put_records(IndexWriter& writer, BlockReader& reader, const FileDescriptor& fd,
                 const RecordRange& range, std::optional<uint32_t> in_place_file);

}  // namespace ddstage::formats
