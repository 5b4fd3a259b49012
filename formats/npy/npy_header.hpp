// The header of a NumPy .npy file (format versions 1.0, 2.0 and 3.0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/dtype.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::formats {

/// The first six bytes of every .npy file.
inline constexpr std::string_view npy_magic = "\x93NUMPY";

/// Bytes a .npy file needs before npy_header_end() can tell where its header ends.
inline constexpr size_t npy_preamble_bytes = 12;

/// One byte swap that turns a big-endian item into a little-endian one: `count` consecutive
/// elements of `width` bytes, from byte `offset` of the item.
struct NpySwap {
  uint64_t offset = 0;
  uint32_t width = 0;
  uint64_t count = 0;
};

/// What a .npy header says about the array that follows it, in ddstage's terms.
struct NpyHeader {
  uint8_t major = 1;
  uint8_t minor = 0;
  /// The element type as the index records it: a string, a void or a record is `bytes` or
  /// `structured` with its size as an extra axis (item_axes), 'U<n>' is n uint32 code points,
  /// datetimes are int64.
  DType dtype = DType::uint8;
  std::vector<uint64_t> item_axes;   ///< axes one numpy element adds after the array's shape
  std::vector<FieldMember> members;  ///< a structured dtype's named members
  std::string encoding;              ///< "ascii" for 'S<n>'
  /// Byte swaps each element needs to be little-endian; empty when it already is.
  std::vector<NpySwap> swaps;
  /// The descr as written when ddstage's dtype is not numpy's own ('U', datetimes): the
  /// manifest keeps it, so a reader can view the bytes as numpy would.
  std::string numpy_descr;
  uint64_t item_bytes = 1;  ///< numpy's itemsize
  bool fortran_order = false;
  std::vector<uint64_t> shape;  ///< empty for a scalar
  uint64_t data_offset = 0;     ///< bytes from the start of the file to the first element
  /// Bytes of one index along dim 0: product of shape[1:] times the item size (a scalar: the
  /// item size).
  uint64_t row_bytes = 0;
  uint64_t data_bytes = 0;  ///< bytes of the whole array

  /// Byte-swaps whole elements in place so they are little-endian (nothing when swaps is empty).
  void to_little_endian(std::span<std::byte> elements) const;
};

/// Where the header that starts with `bytes` (at least npy_preamble_bytes, or the whole file if
/// shorter) ends: the offset of the array data, never less than npy_preamble_bytes. Throws like
/// parse_npy_header.
uint64_t npy_header_end(std::span<const std::byte> bytes, const std::string& name);

/// Parses a .npy header from the first bytes of a file (at least the whole header). The header
/// dict is read as a Python literal: any key order, spacing and trailing commas, unknown keys
/// ignored. Throws UsageError "NAME is not a valid .npy file: reason" for anything malformed,
/// "NAME: unsupported dtype 'X' (supported: ...)" for dtypes ddstage has no DType for (long
/// double), and "NAME: ..." naming the member and the reason for objects and nested records.
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name);

/// Fills its argument with the next bytes of a stream, or throws.
using ReadNext = std::function<void(std::span<std::byte> out)>;

/// Reads and parses the header of a .npy array of at most `limit` bytes from a stream (a
/// deflated .npz member): the preamble, then the rest of the header, never past it; errors say
/// `name`. The result's data_offset is from the start of the array.
NpyHeader read_npy_header(const ReadNext& read_next, uint64_t limit, const std::string& name);

/// Reads and parses the header of a .npy array that starts at `offset` of an open file and
/// spans at most `limit` bytes (a member of a .npz); errors say `name`. The result's
/// data_offset is from the start of the file.
NpyHeader read_npy_header(const FileDescriptor& fd, uint64_t offset, uint64_t limit,
                          const std::string& name);

/// Reads and parses the header of an open .npy file; errors name fd.path().
NpyHeader read_npy_header(const FileDescriptor& fd);

}  // namespace ddstage::formats
