#include "block_reader.hpp"

#include <fcntl.h>

#include <fmt/format.h>
#include <algorithm>

#include "ddstage/error.hpp"
#include "ddstage/mapped_file.hpp"

namespace ddstage::formats {
namespace {

/// Below this, pread into a reused buffer is cheaper than setting up and tearing down a mapping.
constexpr uint64_t map_threshold = 1u << 20;

}  // namespace

BlockReader::BlockReader(uint64_t memory_budget) : m_budget(std::max<uint64_t>(memory_budget, 1)) {}

void BlockReader::for_each_record(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                                  uint64_t count, const RecordFn& fn) {
  if (count == 0) return;
  if (record_bytes == 0) {
    for (uint64_t i = 0; i < count; ++i) fn(i, {});
    return;
  }
  for_each_block(fd, offset, record_bytes, count,
                 [&](uint64_t first, uint64_t records, std::span<const std::byte> bytes) {
                   for (uint64_t i = 0; i < records; ++i) {
                     fn(first + i, bytes.subspan(i * record_bytes, record_bytes));
                   }
                 });
}

void BlockReader::for_each_block(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                                 uint64_t count, const BlockFn& fn) {
  if (count == 0) return;
  // Large ranges are read through a mapping: checksumming and packing then work on the page
  // cache directly, which saves a copy of every byte (pread copies it into our buffer first).
  if (record_bytes > m_budget || count * record_bytes >= map_threshold) {
    return read_mapped(fd, offset, record_bytes, count, fn);
  }
  read_blocks(fd, offset, record_bytes, count, fn);
}

void BlockReader::read_blocks(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                              uint64_t count, const BlockFn& fn) {
  const uint64_t per_block = std::min(count, m_budget / record_bytes);
  if (per_block < count) {
    // Several blocks: ask for aggressive readahead, which matters on Lustre/GPFS. Advisory only.
    ::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(count * record_bytes),
                    POSIX_FADV_SEQUENTIAL);
  }
  // Grow only: one buffer serves a million small files without reallocating.
  if (m_buffer.size() < per_block * record_bytes) m_buffer.resize(per_block * record_bytes);
  for (uint64_t first = 0; first < count; first += per_block) {
    const uint64_t records = std::min(per_block, count - first);
    std::span<std::byte> block(m_buffer.data(), records * record_bytes);
    fd.pread_exact(block, offset + first * record_bytes);
    fn(first, records, block);
  }
}

void BlockReader::read_mapped(const FileDescriptor& fd, uint64_t offset, uint64_t record_bytes,
                              uint64_t count, const BlockFn& fn) {
  // Page-cache backed: the kernel can drop pages already checksummed, a heap buffer could not.
  MappedFile map(fd.path(), MappedFile::Mode::read_only);
  map.advise_sequential();
  const auto bytes = map.bytes();
  const uint64_t end = offset + count * record_bytes;
  if (bytes.size() < end) {
    throw Error(ErrorKind::runtime,
                fmt::format("{} changed while being read: expected at least {} bytes, found {}",
                            fd.path().string(), end, bytes.size()),
                {.file = fd.path().string()});
  }
  fn(0, count, bytes.subspan(offset, count * record_bytes));
}

void put_records(IndexWriter& writer, BlockReader& reader, const FileDescriptor& fd,
                 const RecordRange& range, std::optional<uint32_t> in_place_file) {
  const uint64_t size = range.record_bytes;
  if (in_place_file && size > 0) {
    reader.for_each_block(fd, range.offset, size, range.count,
                          [&](uint64_t first, uint64_t count, std::span<const std::byte> bytes) {
                            writer.put_rows_in_place(range.field, range.first_sample + first, count,
                                                     *in_place_file, range.offset + first * size,
                                                     size, size, bytes);
                          });
    return;
  }
  reader.for_each_record(
      fd, range.offset, size, range.count, [&](uint64_t i, std::span<const std::byte> bytes) {
        const uint64_t sample = range.first_sample + i;
        if (in_place_file) {
          writer.put_in_place(sample, range.field, *in_place_file, range.offset + i * size, bytes);
        } else {
          writer.put_packed(sample, range.field, bytes);
        }
      });
}

}  // namespace ddstage::formats
