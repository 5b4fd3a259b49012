#include "hdf5_types.hpp"

#include <fmt/format.h>

#include <cstring>

#include "ddstage/error.hpp"

namespace ddstage::formats::detail {
namespace {

DType integer_dtype(std::size_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? DType::int8 : DType::uint8;
    case 2:
      return is_signed ? DType::int16 : DType::uint16;
    case 4:
      return is_signed ? DType::int32 : DType::uint32;
    case 8:
      return is_signed ? DType::int64 : DType::uint64;
    default:
      return DType::bytes;
  }
}

// Layout (sign, exponent, mantissa positions and sizes) of IEEE binary16/32/64; a float of
// the right size but another layout would be mislabelled if we went by size alone.
bool is_ieee_float(hid_t type, std::size_t size) {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  const size_t bits = size * 8;
  const size_t exponent_bits = size == 2 ? 5 : size == 4 ? 8 : 11;
  return spos == bits - 1 && esize == exponent_bits && epos == bits - 1 - exponent_bits &&
         mpos == 0 && msize == epos && H5Tget_offset(type) == 0 && H5Tget_precision(type) == bits;
}

// h5py writes numpy bools as an enum with an int8 base and the members FALSE=0, TRUE=1.
bool is_h5py_bool(hid_t type) {
  if (H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) return false;
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(type, i);
    if (name == nullptr) return false;
    int8_t value = -1;
    bool ok = H5Tget_member_value(type, i, &value) >= 0 &&
              std::strcmp(name, value == 0 ? "FALSE" : "TRUE") == 0 && (value == 0 || value == 1);
    H5free_memory(name);
    if (!ok) return false;
  }
  return true;
}

DType supported_dtype(hid_t type) {
  const std::size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      // Padding bits (precision below the size) would make raw bytes differ from the values.
      if (H5Tget_precision(type) != size * 8 || H5Tget_offset(type) != 0) return DType::bytes;
      return integer_dtype(size, H5Tget_sign(type) == H5T_SGN_2);
    case H5T_FLOAT:
      if (size == 2 && is_ieee_float(type, 2)) return DType::float16;
      if (size == 4 && is_ieee_float(type, 4)) return DType::float32;
      if (size == 8 && is_ieee_float(type, 8)) return DType::float64;
      return DType::bytes;
    case H5T_ENUM:
      return is_h5py_bool(type) ? DType::boolean : DType::bytes;
    default:
      return DType::bytes;
  }
}

std::string_view class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_TIME:
      return "time";
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ENUM:
      return "enum";
    case H5T_VLEN:
      return "variable-length";
    case H5T_ARRAY:
      return "array";
    default:
      return "unknown";
  }
}

}  // namespace

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) return "variable-length string";
  auto dtype = supported_dtype(type);
  std::string name = dtype == DType::bytes
                         ? fmt::format("{} of {} bytes", class_name(cls), H5Tget_size(type))
                         : std::string(dtype_name(dtype));
  if (H5Tget_size(type) > 1 && (cls == H5T_INTEGER || cls == H5T_FLOAT) &&
      H5Tget_order(type) == H5T_ORDER_BE) {
    name += " big-endian";
  }
  return name;
}

DType dtype_of(hid_t type, const std::string& path, const std::string& file) {
  auto dtype = supported_dtype(type);
  if (dtype == DType::bytes) {
    throw UsageError(fmt::format("dataset {} in {} has unsupported type {} (supported: {})", path,
                                 file, describe_type(type), supported_dtypes()));
  }
  return dtype;
}

bool stored_as_memory(hid_t type) {
  return H5Tget_size(type) == 1 || H5Tget_order(type) == H5T_ORDER_LE;
}

H5Handle memory_type(hid_t file_type, const std::string& file) {
  auto type = h5_own(H5Tcopy(file_type), H5Tclose, "H5Tcopy", file);
  if (!stored_as_memory(file_type)) {
    h5_check(H5Tset_order(type.get(), H5T_ORDER_LE), "H5Tset_order", file);
  }
  return type;
}

}  // namespace ddstage::formats::detail
