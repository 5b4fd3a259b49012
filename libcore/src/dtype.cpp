#include "ddstage/dtype.hpp"

#include <array>
#include <utility>

namespace ddstage {
namespace {

struct DTypeRow {
  DType type;
  std::string_view name;
  uint32_t size;
};

constexpr std::array<DTypeRow, 16> dtype_rows{{
    {DType::bytes, "bytes", 1},
    {DType::boolean, "bool", 1},
    {DType::int8, "int8", 1},
    {DType::uint8, "uint8", 1},
    {DType::int16, "int16", 2},
    {DType::uint16, "uint16", 2},
    {DType::int32, "int32", 4},
    {DType::uint32, "uint32", 4},
    {DType::int64, "int64", 8},
    {DType::uint64, "uint64", 8},
    {DType::float16, "float16", 2},
    {DType::float32, "float32", 4},
    {DType::float64, "float64", 8},
    {DType::complex64, "complex64", 8},
    {DType::complex128, "complex128", 16},
    {DType::structured, "structured", 1},
}};

const DTypeRow& row(DType t) {
  return dtype_rows[static_cast<std::size_t>(t)];
}

}  // namespace

uint32_t dtype_size(DType t) {
  return row(t).size;
}

std::string_view dtype_name(DType t) {
  return row(t).name;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& r : dtype_rows) {
    if (r.name == name) return r.type;
  }
  return std::nullopt;
}

std::string supported_dtypes() {
  std::string out;
  for (const auto& r : dtype_rows) {
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  return out;
}

bool dtype_is_integer(DType t) {
  return t >= DType::int8 && t <= DType::uint64;
}

}  // namespace ddstage
