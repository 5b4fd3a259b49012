// One HDF5 dataset as flattening sees it, and streaming its rows within a memory budget.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddstage/dtype.hpp"
#include "ddstage/mapped_file.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "hdf5_handle.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats::detail {

/// What flattening needs to know about one dataset.
struct DatasetInfo {
  std::string path;
  /// The HDF5 file the dataset lives in: the one named on the command line, or the target of
  /// an external link on the way to it. `offset` is an offset in this file.
  std::string file;
  /// Other files its values depend on, recorded as sources: external raw data files
  /// (H5Pset_external) they are decoded from, or, when `file` is such a raw file read in
  /// place, the HDF5 file that describes it.
  std::vector<std::string> other_files;
  DType dtype = DType::bytes;
  ElementType element;         ///< dtype and what else the index records of one element
  std::vector<uint64_t> dims;  ///< empty for a scalar
  uint64_t row_bytes = 0;      ///< bytes of one index along dim 0 (of the whole value if scalar)
  uint64_t total_bytes = 0;
  /// File offset of the data when it can be read in place: contiguous, fully allocated, not
  /// filtered and stored exactly as it decodes (element.in_place).
  std::optional<uint64_t> offset;
  uint64_t chunk_rows = 1;  ///< rows per chunk along dim 0 (1 unless chunked)
};

/// Reads a dataset's type, shape and storage. UsageError for unsupported types, filters this
/// process cannot decode and external raw data files it cannot read. `element`, when given,
/// stands for the dataset's own element type (a compound member's field sees the records as
/// bytes).
DatasetInfo describe_dataset(hid_t dset, std::string path, const std::string& file,
                             const ElementType* element = nullptr);

/// Records every file the dataset's bytes come from as a source of the index (so staleness
/// covers a file reached through an external link) and returns the file id of info.file.
uint32_t add_data_files(IndexWriter& writer, const DatasetInfo& info);

/// "[1000,28,28]" ("[]" for a scalar).
std::string shape_text(const std::vector<uint64_t>& dims);

/// Decodes the whole dataset at `path` into dest (total_bytes of mem_type).
void read_all(hid_t dset, hid_t mem_type, std::span<std::byte> dest, const std::string& path,
              const std::string& file);

/// Streams rows of one dataset in ascending order within a memory budget: in place straight
/// from a read-only mapping of the file (no copy; the page cache bounds memory), otherwise with
/// H5Dread of whole chunks along dim 0 (never row by row: a single-row read of a deflated
/// dataset decodes its whole chunk).
class RowStream {
 public:
  /// Decodes through HDF5 into `mem_type`, `row_bytes` per row in memory.
  static RowStream decoding(hid_t dset, hid_t mem_type, const DatasetInfo& info, uint64_t row_bytes,
                            uint64_t budget, const std::string& file);
  /// Serves the stored bytes at info.offset of info.file from a mapping.
  static RowStream in_place(const DatasetInfo& info, uint64_t budget);

  /// Bytes of rows [first, last), valid until the next call. `first` must not decrease
  /// from one call to the next, and last <= dims[0].
  std::span<const std::byte> rows(uint64_t first, uint64_t last);

 private:
  RowStream(const DatasetInfo& info, uint64_t row_bytes, uint64_t granule, uint64_t budget);
  void read_block();

  // Decoding source (dataset and memory type) or in-place source (the mapped dataset bytes).
  hid_t m_dset = H5I_INVALID_HID;
  hid_t m_mem_type = H5I_INVALID_HID;
  MappedFile m_map;
  std::span<const std::byte> m_mapped;
  std::vector<uint64_t> m_dims;
  std::string m_path;
  std::string m_file;

  uint64_t m_row_bytes;
  uint64_t m_granule;  // reads start at multiples of this (the chunk rows)
  uint64_t m_step;     // rows per read
  std::unique_ptr<std::byte[]> m_buffer;
  uint64_t m_capacity = 0;  // bytes
  uint64_t m_begin = 0;     // first row held in m_buffer
  uint64_t m_end = 0;       // one past the last row held
};

}  // namespace ddstage::formats::detail
