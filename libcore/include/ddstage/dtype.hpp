// Element types a field can hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddstage {

/// Element type of a field. `bytes` is opaque data (whole files, tar members).
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
  float64
};

/// Size of one element in bytes (1 for `bytes`).
uint32_t dtype_size(DType t);
/// Canonical name, as written to manifest.yaml ("float32", ...).
std::string_view dtype_name(DType t);
/// Parses a canonical name; nullopt if unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// Comma-separated list of every supported name, for error messages.
std::string supported_dtypes();

}  // namespace ddstage
