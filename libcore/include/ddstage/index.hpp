// The dataset index: an immutable, mmap'd map (sample, field) -> (file, offset, length), with
// checksums per block of rows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/dtype.hpp"
#include "ddstage/mapped_file.hpp"

namespace ddstage {

/// Version of the index.bin this build writes; it reads this one and older. Version 2 added
/// the checksum of manifest.yaml's field table to the header; version 3 stores a field's rows
/// as runs (file, base, stride, count) with checksums per block of rows.
inline constexpr uint32_t index_format_version = 3;

namespace detail {

/// index.bin's record of one (sample, field) (man ddstage-index(5)): the whole body of formats
/// 1-2, and a format 3 field whose every row is a run of its own (the checksum is that row's).
struct EntryRecord {
  uint32_t file;
  uint32_t reserved;  ///< zero
  uint64_t offset;
  uint64_t length;
  uint64_t checksum;  ///< xxh3-64 of the bytes
};
static_assert(sizeof(EntryRecord) == 32);

/// Format 3: rows first_sample .. first_sample + count - 1 of a field, row i at
/// base + i * stride of one file, each `length` bytes; checksummed in blocks of block_rows rows
/// (the last one may be shorter), xxh3-64 over a block's rows back to back.
struct RunRecord {
  uint64_t first_sample;
  uint64_t count;
  uint64_t base;
  uint64_t stride;
  uint64_t length;
  uint64_t first_block;  ///< its first block checksum, counted in the field's blocks
  uint32_t file;
  uint32_t block_rows;
};
static_assert(sizeof(RunRecord) == 56);

/// Bounds Index::open puts on a run's blocks, so that a verify path may size a buffer by a
/// block: at most max_block_rows rows (unless the run has one row), and a block of more than
/// one row at most max_block_bytes. A row alone may be as long as its file.
inline constexpr uint64_t max_block_rows = 1u << 16;
inline constexpr uint64_t max_block_bytes = 64u << 20;

/// One field's rows as Index holds them: records (every entry_step-th: formats 1-2 interleave
/// the fields), or runs sorted by first_sample with their block checksums.
struct FieldRows {
  const EntryRecord* entries = nullptr;
  uint64_t entry_step = 1;
  const RunRecord* runs = nullptr;
  uint64_t run_count = 0;
  const uint64_t* blocks = nullptr;
  uint64_t block_count = 0;
};

/// The run holding sample: the last one starting at or before it (runs tile [0, samples), as
/// Index::open checks). O(1) for one run.
inline const RunRecord& run_of(const FieldRows& t, uint64_t sample) noexcept {
  if (t.run_count == 1) return t.runs[0];
  uint64_t lo = 0, n = t.run_count;
  while (n > 1) {
    const uint64_t half = n / 2;
    if (t.runs[lo + half].first_sample <= sample) lo += half;
    n -= half;
  }
  return t.runs[lo];
}

}  // namespace detail

/// Where one (sample, field) lives.
struct Entry {
  uint32_t file = 0;    ///< row of the file table
  uint64_t offset = 0;  ///< byte offset in that file
  uint64_t length = 0;  ///< bytes
};

/// The rows a checksum covers: samples first_sample .. first_sample + rows - 1 of one field,
/// their bytes back to back. A row stored on its own is a block of one row.
struct Block {
  uint64_t first_sample = 0;
  uint64_t rows = 0;
  uint64_t checksum = 0;  ///< xxh3-64
};

/// One member of a structured field's record (numpy: one entry of dtype.fields).
struct FieldMember {
  std::string name;
  DType dtype = DType::uint8;  ///< never `structured`: nested records are refused at flatten
  uint64_t offset = 0;         ///< byte offset inside the record
  /// Subarray shape; for `bytes`, the last axis is the length of a fixed byte string (numpy
  /// "S<n>"), so the member's size is always dtype_size(dtype) times the shape's product.
  std::vector<uint64_t> shape;
};

/// One name of an enumerated integer field (HDF5 enum): value `value` means `name`.
struct EnumName {
  std::string name;
  int64_t value = 0;
};

/// One field of every sample: its element type and row shape.
struct FieldInfo {
  std::string name;
  DType dtype = DType::bytes;
  /// Shape of one row. For a variable field, the shape of one element of the
  /// variable first dimension (empty for scalars or opaque bytes).
  std::vector<uint64_t> shape;
  bool variable = false;
  /// Bytes per row when fixed, 0 when variable.
  uint64_t row_bytes = 0;
  /// Where it came from (an HDF5 path, a pattern, "file contents").
  std::string source;
  /// For `structured`: the record's members, by offset; the shape's last axis is the record's
  /// size (numpy itemsize). Empty for every other dtype.
  std::vector<FieldMember> members;
  /// For `bytes` that are text: "ascii" or "utf-8". A fixed field's last axis is then the
  /// length of one NUL-padded string (numpy "S<n>"); a variable field's rows are one string
  /// each. Empty for opaque bytes and every other dtype.
  std::string encoding;
  /// For an integer field that was an enum: its names (in the source's order). Empty otherwise.
  std::vector<EnumName> enum_names;
};

/// What a file-table row is: an origin file entries point into, a pack file inside the .ddx
/// directory, or an origin file whose bytes were all copied into packs (listed for provenance;
/// reads never touch it, so its changes do not make the index stale).
enum class FileKind : uint32_t { source = 0, pack = 1, copied = 2 };

/// One file an entry can point at, with its size and mtime at flatten time.
struct FileInfo {
  std::string
      path;  ///< relative to the source root (source, copied) or to the .ddx directory (pack)
  FileKind kind = FileKind::source;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

/// What manifest.yaml says beyond fields and files.
struct ManifestInfo {
  std::string name;
  std::string format;          ///< hdf5, files, npy
  std::filesystem::path root;  ///< absolute directory source paths are relative to
  std::string tool_version;
  std::string created;
  uint64_t total_bytes = 0;
  /// Format-specific settings recorded at flatten time (e.g. "groups": "/samples/*").
  std::map<std::string, std::string> attributes;
};

/// A flattened dataset (DATASET.ddx/). Immutable after open, safe to share between threads.
class Index {
 public:
  /// Opens and validates manifest.yaml and index.bin (magic, version, header and body checksums,
  /// section offsets, the manifest's field table against its checksum and against itself), then
  /// every entry or run and its blocks (file id, last row within the file's recorded size,
  /// fixed rows exactly row_bytes, runs tiling the samples): no size a reader or loader takes
  /// from the result can exceed what the checksummed index says. O(entries + runs + blocks).
  /// Throws IndexError naming the file and the damage, UsageError when dir is not an index.
  /// index.bin is mapped (shared page cache: a client, whose DataLoader workers all open it) or
  /// copied into this process's memory (a server rank: index.bin truncated in place under a
  /// mapping raised SIGBUS, which ended the rank and every dataset it held).
  enum class Holding { mapped, copied };
  static Index open(const std::filesystem::path& dir, Holding holding = Holding::mapped);

  const std::filesystem::path& dir() const noexcept { return m_dir; }
  const ManifestInfo& manifest() const noexcept { return m_manifest; }
  uint64_t samples() const noexcept { return m_samples; }
  std::span<const FieldInfo> fields() const noexcept { return m_fields; }
  std::span<const FileInfo> files() const noexcept { return m_files; }

  /// Field id by name; throws UsageError listing the fields if there is none.
  uint32_t field_id(std::string_view name) const;
  /// The only field, or UsageError asking for --field when there are several.
  uint32_t default_field() const;

  /// O(1) for a field stored row by row or as one run, O(log runs) otherwise. Caller checks
  /// sample < samples() and field < fields().size().
  Entry entry(uint64_t sample, uint32_t field) const noexcept {
    const detail::FieldRows& t = m_rows[field];
    if (t.entries) {
      const auto& e = t.entries[sample * t.entry_step];
      return {e.file, e.offset, e.length};
    }
    const detail::RunRecord& r = detail::run_of(t, sample);
    return {r.file, r.base + (sample - r.first_sample) * r.stride, r.length};
  }
  /// The first sample past the run holding (sample, field): rows from sample up to it share
  /// one length (sample + 1 for a field stored row by row). Same cost as entry().
  uint64_t run_end(uint64_t sample, uint32_t field) const noexcept {
    const detail::FieldRows& t = m_rows[field];
    if (t.entries) return sample + 1;
    const detail::RunRecord& r = detail::run_of(t, sample);
    return r.first_sample + r.count;
  }
  /// The checksummed block holding (sample, field). Same cost as entry().
  Block block(uint64_t sample, uint32_t field) const noexcept;
  /// Absolute path of a file-table row.
  std::filesystem::path resolve(uint32_t file) const;
  /// Throws StaleError naming the file if its size or mtime differ from flatten time.
  void check_fresh(uint32_t file) const;
  /// Identity of this exact index.bin (its header checksum, which covers the body checksum):
  /// a store records it at load, so a client never addresses shards with a re-flattened index.
  uint64_t fingerprint() const noexcept { return m_fingerprint; }
  /// Runs and blocks of a field (a field stored row by row counts each row as both): what its
  /// index costs, for `info` and benches.
  uint64_t runs(uint32_t field) const noexcept;
  uint64_t blocks(uint32_t field) const noexcept;
  /// A field's bytes and shortest and longest row, in O(runs) (O(samples) for a field stored
  /// row by row): for `info` on an index whose few runs stand for 2^40 rows.
  struct FieldStats {
    uint64_t bytes = 0;  ///< saturates at 2^64 - 1
    uint64_t min_row = 0;
    uint64_t max_row = 0;
  };
  FieldStats field_stats(uint32_t field) const noexcept;
  /// check_fresh for every file reads can touch (not `copied` ones); the first stale one throws.
  void check_all_fresh() const;

 private:
  Index() = default;
  std::filesystem::path m_dir;
  ManifestInfo m_manifest;
  std::vector<FieldInfo> m_fields;
  std::vector<FileInfo> m_files;
  uint64_t m_samples = 0;
  uint64_t m_fingerprint = 0;
  MappedFile m_map;
  std::vector<detail::FieldRows> m_rows;
};

}  // namespace ddstage
