// The header of a NumPy .npy file (format versions 1.0, 2.0 and 3.0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/dtype.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::formats {

/// The first six bytes of every .npy file.
inline constexpr std::string_view npy_magic = "\x93NUMPY";

/// What a .npy header says about the array that follows it.
struct NpyHeader {
  uint8_t major = 1;
  uint8_t minor = 0;
  DType dtype = DType::uint8;
  bool fortran_order = false;
  std::vector<uint64_t> shape;  ///< empty for a scalar
  uint64_t data_offset = 0;     ///< bytes from the start of the file to the first element
  /// Bytes of one index along dim 0: product of shape[1:] times the item size (a scalar: the
  /// item size).
  uint64_t row_bytes = 0;
  uint64_t data_bytes = 0;  ///< bytes of the whole array
};

/// Parses a .npy header from the first bytes of a file (at least the whole header). The header
/// dict is read as a Python literal: any key order, spacing and trailing commas, unknown keys
/// ignored. Throws UsageError "NAME is not a valid .npy file: reason" for anything malformed and
/// "NAME: unsupported dtype 'X' (supported: ...)" for dtypes ddstage has no DType for
/// (big-endian, complex, strings, objects, structured).
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name);

/// Reads and parses the header of an open .npy file; errors name fd.path().
NpyHeader read_npy_header(const FileDescriptor& fd);

}  // namespace ddstage::formats
