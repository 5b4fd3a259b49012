// Element types a field can hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddstage {

/// Element type of a field. `bytes` is opaque data (whole files, tar members); a field of bytes
/// with an encoding (FieldInfo::encoding) is text. `structured` is a record (numpy's structured
/// dtype, HDF5's compound): one element is one byte, and a field's last axis is the record's
/// size, like `bytes`, so every size computed from dtype_size() and the shape stays right; its
/// members are in FieldInfo::members.
enum class DType : uint8_t {
  bytes,
  boolean,
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  float32,
  float64,
  complex64,   ///< two float32, real first (numpy complex64, h5py's compound {r, i})
  complex128,  ///< two float64
  structured
};

/// Size of one element in bytes (1 for `bytes`).
uint32_t dtype_size(DType t);
/// Canonical name, as written to manifest.yaml ("float32", ...).
std::string_view dtype_name(DType t);
/// Parses a canonical name; nullopt if unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// Comma-separated list of every supported name, for error messages.
std::string supported_dtypes();
/// True for the integer types (not bool): those an enum may be based on.
bool dtype_is_integer(DType t);

}  // namespace ddstage
