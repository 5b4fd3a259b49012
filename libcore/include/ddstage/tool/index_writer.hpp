// Builds a DATASET.ddx directory atomically: everything goes to a temporary sibling first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddstage/index.hpp"

namespace ddstage {

/// Progress of a long operation; a total is 0 when unknown.
struct ProgressUpdate {
  uint64_t items_done = 0;  ///< flatten: rows (sample x field) put
  uint64_t total_items = 0;
  uint64_t bytes_done = 0;
  double seconds = 0;
  bool final = false;
  /// Flatten: samples done (rows put / fields: exact when formats go sample by sample) and of
  /// how many; total_bytes when the format announced it (IndexWriter::expect_bytes), so the
  /// ETA follows the bytes, not rows of very different sizes.
  uint64_t samples_done = 0;
  uint64_t total_samples = 0;
  uint64_t total_bytes = 0;
};
using ProgressFn = std::function<void(const ProgressUpdate&)>;

/// How to write an index.
struct IndexWriterOptions {
  std::filesystem::path out;           ///< the DATASET.ddx directory to create
  bool force = false;                  ///< replace an existing index once the new one is complete
  uint64_t pack_bytes = 256ull << 20;  ///< start a new pack file past this size
  std::string name;                    ///< dataset name (default: out's stem)
  /// A run's rows are checksummed in blocks of about this many bytes (at most 65536 rows, at
  /// least one): verifying one row reads its block, and the index holds 8 bytes per block.
  /// 256 KiB: see the measurement in man ddstage-index(5).
  uint64_t block_bytes = 256u << 10;
  ProgressFn progress;  ///< called at most ~5 times a second, and once at the end
};

/// Writes manifest.yaml, index.bin and pack files into a temporary directory next to `out`, and
/// renames it into place in commit(). Destroying an uncommitted writer removes the temporary
/// directory, so a failed or interrupted flatten leaves any previous index untouched.
/// Single-threaded: a Format feeds it sample by sample or field by field, in any order.
///
/// The writer finds runs itself: rows of a field put for consecutive samples, in one file, of
/// one length, at a fixed stride (contiguous arrays, packs of fixed-size fields) are stored as
/// one run (file, base, stride, count) with a checksum per block of rows, so memory and index
/// size grow with runs and blocks, not rows. Rows put out of order just make more runs.
class IndexWriter {
 public:
  /// Refuses (UsageError) an existing `out` unless force; creates the temporary directory.
  explicit IndexWriter(IndexWriterOptions options);
  IndexWriter(const IndexWriter&) = delete;
  IndexWriter& operator=(const IndexWriter&) = delete;
  ~IndexWriter();

  /// Declares the fields and sample count; must come before any put.
  void define(std::vector<FieldInfo> fields, uint64_t samples);
  /// The bytes the puts will add up to, when the format knows: progress then shows a percentage
  /// and ETA by bytes.
  void expect_bytes(uint64_t total);
  /// Adds an origin file (records its size and mtime now) and returns its file id.
  uint32_t add_source(const std::filesystem::path& path);
  /// Records an entry whose bytes stay in place in a source file; checksums `bytes`.
  void put_in_place(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
                    std::span<const std::byte> bytes);
  /// Records `count` rows of a field at once, for samples first_sample.. (row i at
  /// offset + i * stride of file, row_bytes each); `rows` holds their bytes back to back, which
  /// are checksummed. Same index as count put_in_place calls, without their per-row cost: a
  /// format that knows a contiguous range hands it over in pieces of any size.
  void put_rows_in_place(uint32_t field, uint64_t first_sample, uint64_t count, uint32_t file,
                         uint64_t offset, uint64_t stride, uint64_t row_bytes,
                         std::span<const std::byte> rows);
  /// Appends `bytes` to the current pack file and records the entry.
  void put_packed(uint64_t sample, uint32_t field, std::span<const std::byte> bytes);
  /// The same for a row of `length` bytes that `fill` writes in order into the spans it is
  /// handed, `piece_bytes` each but the last: a row larger than the memory a format may use
  /// (a deflated .npz row) is packed one piece at a time.
  void put_packed_pieces(uint64_t sample, uint32_t field, uint64_t length, uint64_t piece_bytes,
                         const std::function<void(std::span<std::byte>)>& fill);
  /// The source format's name, recorded in the manifest (formats::flatten sets it).
  void set_format(const std::string& name);
  /// A format-specific fact for the manifest (e.g. the groups pattern).
  void set_attribute(const std::string& key, const std::string& value);

  /// Checks every entry was put exactly once (logic_error otherwise), writes header, checksums and
  /// manifest, fsyncs, and renames the temporary directory to `out` (atomically exchanging with an
  /// old index under --force).
  void commit();

  /// True if path is the output or the temporary directory, or inside either: a format that
  /// walks directories skips it, so an index written inside its source tree is not data.
  bool is_own_path(const std::filesystem::path& path) const;

  uint64_t bytes_written() const noexcept;
  uint64_t packed_bytes() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> m;
};

}  // namespace ddstage
