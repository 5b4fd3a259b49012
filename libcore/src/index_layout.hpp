// On-disk layout of index.bin (man ddstage-index(5)). Little-endian, 8-byte aligned.
#pragma once

#include <bit>
#include <cstdint>

#include "ddstage/index.hpp"  // EntryRecord, RunRecord

namespace ddstage::detail {

static_assert(
    std::endian::native == std::endian::little,
    "index.bin is little-endian and mapped in place; big-endian hosts need a converting reader");

inline constexpr char index_magic[8] = {'D', 'D', 'S', 'I', 'N', 'D', 'E', 'X'};
/// Entries start here; the gap after the header leaves later versions room to grow it.
inline constexpr uint64_t entries_offset = 128;

struct IndexHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  ///< sizeof(IndexHeader) of the writer
  uint64_t samples;
  uint32_t fields;
  uint32_t files;
  /// Formats 1-2: samples * fields EntryRecords, sample-major. Format 3: fields FieldTable
  /// records, each pointing at its field's EntryRecords or RunRecords and block checksums.
  uint64_t entries_offset;
  uint64_t file_table_offset;  ///< files FileRecord records
  uint64_t names_offset;       ///< UTF-8 path bytes the file records point into
  uint64_t file_bytes;         ///< total size of index.bin
  uint64_t body_checksum;      ///< xxh3-64 of [entries_offset, file_bytes)
  uint64_t header_checksum;    ///< xxh3-64 of the header's header_bytes with this field zero
  /// Format 2 on: xxh3-64 of manifest.yaml's field table (fields_checksum()), so an edited
  /// field (shape, dtype, row_bytes, order, name) is refused rather than trusted.
  uint64_t fields_checksum;
};
static_assert(sizeof(IndexHeader) == 88);
/// header_bytes of format 1, which ends at header_checksum and has no fields_checksum.
inline constexpr uint32_t header_bytes_v1 = 80;

/// Format 3: how one field's rows are stored.
enum class FieldLayout : uint32_t { entries = 0, runs = 1 };

/// Format 3, one per field.
struct FieldTable {
  uint32_t layout;          ///< FieldLayout
  uint32_t reserved;        ///< zero
  uint64_t records_offset;  ///< from the start of index.bin: EntryRecords or RunRecords
  uint64_t records;         ///< entries: samples; runs: the run count (>= 1)
  uint64_t blocks_offset;   ///< runs: the uint64_t block checksums of all runs, in run order
  uint64_t blocks;          ///< runs: the sum of every run's block count; entries: 0
};
static_assert(sizeof(FieldTable) == 40);

struct FileRecord {
  uint64_t name_offset;  ///< from names_offset
  uint32_t name_length;
  uint32_t kind;  ///< FileKind
  uint64_t size;
  int64_t mtime_ns;
};
static_assert(sizeof(FileRecord) == 32);

}  // namespace ddstage::detail
