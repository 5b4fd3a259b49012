#include "hdf5_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>

#include "ddstage/error.hpp"

namespace ddstage::formats::detail {
namespace {

/// Where a type was found, for refusals; `member` names the record member being mapped.
struct Where {
  const std::string& path;
  const std::string& file;
  std::string member;
};

/// An element type together with the memory type HDF5 decodes it to.
struct Mapped {
  ElementType element;
  H5Handle memory;
};

[[noreturn]] void refuse(const Where& at, hid_t type, const std::string& reason) {
  const std::string member = at.member.empty() ? "" : fmt::format("member '{}' ", at.member);
  throw UsageError(fmt::format("dataset {} in {} has unsupported type {}: {}{}", at.path, at.file,
                               describe_type(type), member, reason),
                   {.file = at.file});
}

H5Handle own_type(hid_t id, const Where& at, std::string_view call) {
  return h5_own(id, H5Tclose, call, at.file);
}

hid_t native_integer(std::size_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8;
    case 2:
      return is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
    case 4:
      return is_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
    case 8:
      return is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
    default:
      return H5I_INVALID_HID;
  }
}

DType integer_dtype(std::size_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? DType::int8 : DType::uint8;
    case 2:
      return is_signed ? DType::int16 : DType::uint16;
    case 4:
      return is_signed ? DType::int32 : DType::uint32;
    default:
      return is_signed ? DType::int64 : DType::uint64;
  }
}

/// IEEE binary16 little-endian, which HDF5 1.10 has no predefined type for (h5py builds it
/// the same way).
H5Handle half_type(const Where& at) {
  auto t = own_type(H5Tcopy(H5T_IEEE_F32LE), at, "H5Tcopy");
  h5_check(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "H5Tset_fields", at.file);
  h5_check(H5Tset_size(t.get(), 2), "H5Tset_size", at.file);
  h5_check(H5Tset_precision(t.get(), 16), "H5Tset_precision", at.file);
  h5_check(H5Tset_ebias(t.get(), 15), "H5Tset_ebias", at.file);
  return t;
}

// Stored bytes equal decoded ones only when every property of the two types agrees (byte
// order, precision, padding, exponent bias, member offsets...): the layout alone is not enough
// (VAX floats have IEEE's layout and another bias). A variable-length element is never stored
// as it decodes (the file holds references into its heap), even where H5Dget_type's type,
// described as in memory, equals the memory type.
Mapped finish_as(ElementType element, H5Handle memory, bool stored_as_decoded) {
  element.bytes = H5Tget_size(memory.get());
  element.in_place = !element.variable && stored_as_decoded;
  return {std::move(element), std::move(memory)};
}

Mapped finish(ElementType element, H5Handle memory, hid_t file_type, const Where& at) {
  const bool same = h5_check(H5Tequal(file_type, memory.get()), "H5Tequal", at.file) > 0;
  return finish_as(std::move(element), std::move(memory), same);
}

Mapped map_type(hid_t type, const Where& at);

Mapped map_integer(hid_t type, const Where& at) {
  const std::size_t size = H5Tget_size(type);
  const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
  const hid_t native = native_integer(size, is_signed);
  if (native < 0) refuse(at, type, "integers of this size have no numpy type");
  return finish({.dtype = integer_dtype(size, is_signed)}, own_type(H5Tcopy(native), at, "H5Tcopy"),
                type, at);
}

/// A numpy float as np.finfo describes it.
struct NumpyFloat {
  DType dtype;
  std::size_t bytes;
  std::size_t mantissa_bits;
  int64_t max_exponent;
  int64_t min_exponent;
};

constexpr NumpyFloat numpy_floats[] = {{DType::float16, 2, 10, 16, -14},
                                       {DType::float32, 4, 23, 128, -126},
                                       {DType::float64, 8, 52, 1024, -1022}};

// h5py's rule (TypeFloatID.py_dtype): the smallest numpy float at least as wide as the stored
// one that holds its mantissa and its exponent range, whatever the stored byte size says
// (bfloat16 is float32, a 4-byte float with an 11-bit exponent float64). Where none does, h5py
// picks long double.
Mapped map_float(hid_t type, const Where& at) {
  std::size_t sign_pos = 0, exp_pos = 0, exp_bits = 0, mant_pos = 0, mant_bits = 0;
  h5_check(H5Tget_fields(type, &sign_pos, &exp_pos, &exp_bits, &mant_pos, &mant_bits),
           "H5Tget_fields", at.file);
  const auto bias = static_cast<int64_t>(H5Tget_ebias(type));
  const std::size_t size = H5Tget_size(type);
  for (const auto& f : numpy_floats) {
    if (f.bytes >= size && mant_bits <= f.mantissa_bits && exp_bits <= 16 &&
        (int64_t{1} << exp_bits) - bias - 1 <= f.max_exponent && 1 - bias >= f.min_exponent) {
      auto memory =
          f.dtype == DType::float16
              ? half_type(at)
              : own_type(H5Tcopy(f.dtype == DType::float32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE),
                         at, "H5Tcopy");
      return finish({.dtype = f.dtype}, std::move(memory), type, at);
    }
  }
  refuse(at, type,
         fmt::format("no float16, float32 or float64 holds its {}-bit mantissa and {}-bit "
                     "exponent of bias {} (h5py reads it as long double, which has no portable "
                     "layout); store it as float64",
                     mant_bits, exp_bits, bias));
}

std::string member_name(hid_t type, unsigned i, const Where& at) {
  char* name = H5Tget_member_name(type, i);
  if (name == nullptr) throw_hdf5_error("H5Tget_member_name", at.file);
  std::string out(name);
  H5free_memory(name);
  return out;
}

// The index keeps enum values as int64; a uint64 one above its range is refused, not wrapped.
int64_t integer_value(const std::byte* bytes, std::size_t size, bool is_signed,
                      const std::string& name, hid_t type, const Where& at) {
  uint64_t raw = 0;
  std::memcpy(&raw, bytes, size);  // little-endian host: the low bytes
  if (is_signed && size < 8 && (raw >> (size * 8 - 1)) != 0) raw |= ~uint64_t{0} << (size * 8);
  if (!is_signed && raw > uint64_t{std::numeric_limits<int64_t>::max()}) {
    refuse(at, type,
           fmt::format("enum name '{}' has the value {}, above the int64 the index "
                       "keeps enum values as",
                       name, raw));
  }
  return static_cast<int64_t>(raw);
}

// The stored values are in the base's byte order: converted to the native base to read them.
std::vector<EnumName> enum_names(hid_t type, hid_t base, hid_t native_base, const Where& at) {
  std::vector<EnumName> out;
  const std::size_t size = H5Tget_size(native_base);
  const bool is_signed = H5Tget_sign(base) == H5T_SGN_2;
  const int members = h5_check(H5Tget_nmembers(type), "H5Tget_nmembers", at.file);
  for (unsigned i = 0; i < static_cast<unsigned>(members); ++i) {
    std::byte value[8] = {};
    h5_check(H5Tget_member_value(type, i, value), "H5Tget_member_value", at.file);
    h5_check(H5Tconvert(base, native_base, 1, value, nullptr, H5P_DEFAULT), "H5Tconvert", at.file);
    auto name = member_name(type, i, at);
    const int64_t v = integer_value(value, size, is_signed, name, type, at);
    out.push_back({std::move(name), v});
  }
  return out;
}

// h5py reads any enum whose names are exactly FALSE = 0 and TRUE = 1 as numpy bool, whatever
// its base, into the type it writes bools as: an int8 enum of those names.
bool is_h5py_bool(const std::vector<EnumName>& names) {
  return names.size() == 2 && std::ranges::all_of(names, [](const EnumName& e) {
           return e.name == (e.value == 0 ? "FALSE" : e.value == 1 ? "TRUE" : "");
         });
}

H5Handle h5py_bool_type(const Where& at) {
  auto t = own_type(H5Tenum_create(H5T_NATIVE_INT8), at, "H5Tenum_create");
  for (const int8_t value : {0, 1}) {
    h5_check(H5Tenum_insert(t.get(), value == 0 ? "FALSE" : "TRUE", &value), "H5Tenum_insert",
             at.file);
  }
  return t;
}

// h5py reads other enums as their base integer: HDF5 then converts the values numerically,
// keeping those no name has (an enum-to-enum conversion goes by name and turns them into all
// ones). The stored bytes are the decoded ones exactly when the base's are.
Mapped map_enum(hid_t type, const Where& at) {
  auto base = own_type(H5Tget_super(type), at, "H5Tget_super");
  auto mapped_base = map_integer(base.get(), at);
  auto names = enum_names(type, base.get(), mapped_base.memory.get(), at);
  if (is_h5py_bool(names)) {
    return finish({.dtype = DType::boolean}, h5py_bool_type(at), type, at);
  }
  return finish_as({.dtype = mapped_base.element.dtype, .enum_names = std::move(names)},
                   std::move(mapped_base.memory), mapped_base.element.in_place);
}

std::string encoding_of(hid_t type, const Where& at) {
  const H5T_cset_t cset = H5Tget_cset(type);
  if (cset == H5T_CSET_ASCII) return "ascii";
  if (cset == H5T_CSET_UTF8) return "utf-8";
  refuse(at, type, "strings in a character set other than ASCII or UTF-8");
}

// h5py reads fixed strings as numpy "S<n>": NUL-padded whatever the stored padding (HDF5
// converts space padding and NUL termination while reading). A variable-length string is
// read as a char* per element.
Mapped map_string(hid_t type, const Where& at) {
  ElementType element{.dtype = DType::bytes, .encoding = encoding_of(type, at)};
  auto memory = own_type(H5Tcopy(type), at, "H5Tcopy");
  if (h5_check(H5Tis_variable_str(type), "H5Tis_variable_str", at.file) > 0) {
    element.variable = true;
    return finish(std::move(element), std::move(memory), type, at);
  }
  h5_check(H5Tset_strpad(memory.get(), H5T_STR_NULLPAD), "H5Tset_strpad", at.file);
  element.shape = {H5Tget_size(type)};
  return finish(std::move(element), std::move(memory), type, at);
}

Mapped map_base(hid_t type, const Where& at, std::string_view container) {
  auto base = own_type(H5Tget_super(type), at, "H5Tget_super");
  auto mapped = map_type(base.get(), at);
  if (mapped.element.variable) {
    refuse(at, type, fmt::format("{} of variable-length items", container));
  }
  return mapped;
}

Mapped map_array(hid_t type, const Where& at) {
  auto base = map_base(type, at, "an array");
  const int rank = h5_check(H5Tget_array_ndims(type), "H5Tget_array_ndims", at.file);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  h5_check(H5Tget_array_dims2(type, dims.data()), "H5Tget_array_dims2", at.file);
  auto memory =
      own_type(H5Tarray_create2(base.memory.get(), static_cast<unsigned>(rank), dims.data()), at,
               "H5Tarray_create2");
  ElementType element = std::move(base.element);
  element.shape.insert(element.shape.begin(), dims.begin(), dims.end());
  const bool same = element.in_place;  // an enum base is stored as decoded yet typed otherwise
  return finish_as(std::move(element), std::move(memory), same);
}

Mapped map_sequence(hid_t type, const Where& at) {
  auto base = map_base(type, at, "a sequence");
  auto memory = own_type(H5Tvlen_create(base.memory.get()), at, "H5Tvlen_create");
  ElementType element = std::move(base.element);
  element.variable = true;
  return finish(std::move(element), std::move(memory), type, at);
}

struct StoredMember {
  std::string name;
  uint64_t offset;
  H5Handle type;
};

std::vector<StoredMember> members_of(hid_t type, const Where& at) {
  std::vector<StoredMember> out;
  const int count = h5_check(H5Tget_nmembers(type), "H5Tget_nmembers", at.file);
  for (unsigned i = 0; i < static_cast<unsigned>(count); ++i) {
    out.push_back({member_name(type, i, at), H5Tget_member_offset(type, i),
                   own_type(H5Tget_member_type(type, i), at, "H5Tget_member_type")});
  }
  return out;
}

H5Handle record_type(std::size_t size, const Where& at) {
  return own_type(H5Tcreate(H5T_COMPOUND, size), at, "H5Tcreate");
}

// h5py reads a compound of exactly the members r then i, floats of the same numpy dtype (byte
// order included), as numpy complex, wherever they lie in the record and whatever padding it
// has: HDF5 converts members by name into the packed {r, i} pair.
std::optional<Mapped> complex_part(const std::vector<StoredMember>& members, const Where& at) {
  if (members.size() != 2 || members[0].name != "r" || members[1].name != "i") return {};
  const hid_t r = members[0].type.get();
  const hid_t i = members[1].type.get();
  if (H5Tget_class(r) != H5T_FLOAT || H5Tget_class(i) != H5T_FLOAT ||
      H5Tget_order(r) != H5Tget_order(i)) {
    return {};
  }
  auto part = map_float(r, at);
  if (map_float(i, at).element.dtype != part.element.dtype ||
      part.element.dtype == DType::float16) {  // numpy has no complex32
    return {};
  }
  return part;
}

Mapped map_compound(hid_t type, const Where& at) {
  const std::size_t size = H5Tget_size(type);
  auto members = members_of(type, at);
  if (auto part = complex_part(members, at)) {
    const std::size_t half = part->element.bytes;
    auto memory = record_type(2 * half, at);
    for (const auto& [name, offset] : {std::pair{"r", std::size_t{0}}, std::pair{"i", half}}) {
      h5_check(H5Tinsert(memory.get(), name, offset, part->memory.get()), "H5Tinsert", at.file);
    }
    return finish({.dtype = half == 4 ? DType::complex64 : DType::complex128}, std::move(memory),
                  type, at);
  }
  auto memory = record_type(size, at);
  ElementType element{.dtype = DType::structured, .shape = {size}};
  bool same = true;  // enum members are stored as decoded yet typed otherwise: ask each member
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> taken;  // name, [begin, end)
  for (const auto& m : members) {
    const Where inner{at.path, at.file, at.member.empty() ? m.name : at.member + "." + m.name};
    auto mapped = map_type(m.type.get(), inner);
    const auto& e = mapped.element;
    if (e.variable) {
      refuse(inner, type,
             "variable-length members are Python objects to h5py, not bytes (take the other "
             "members with --field NAME=/DATASET.MEMBER)");
    }
    if (e.dtype == DType::structured) {
      refuse(inner, type,
             "records inside records are not supported (take the inner record "
             "with --field NAME=/DATASET.MEMBER)");
    }
    if (m.offset + e.bytes > size) {
      refuse(inner, type, "it does not fit the record once converted to its native type");
    }
    // A member wider once converted (a 3-byte float read as float32) can run into the next:
    // h5py's dtype then has overlapping fields and its record reads are garbage.
    for (const auto& [name, begin, end] : taken) {
      if (m.offset < end && begin < m.offset + e.bytes) {
        refuse(inner, type,
               fmt::format("overlaps member '{}' once both are converted to their native types "
                           "(bytes [{}, {}) and [{}, {}) of the record): take the members one by "
                           "one with --field NAME=/DATASET.MEMBER",
                           name, m.offset, m.offset + e.bytes, begin, end));
      }
    }
    taken.push_back({m.name, m.offset, m.offset + e.bytes});
    h5_check(H5Tinsert(memory.get(), m.name.c_str(), m.offset, mapped.memory.get()), "H5Tinsert",
             at.file);
    element.members.push_back({m.name, e.dtype, m.offset, e.shape});
    same = same && e.in_place;
  }
  return finish_as(std::move(element), std::move(memory), same);
}

Mapped map_type(hid_t type, const Where& at) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return map_integer(type, at);
    case H5T_FLOAT:
      return map_float(type, at);
    case H5T_ENUM:
      return map_enum(type, at);
    case H5T_STRING:
      return map_string(type, at);
    case H5T_ARRAY:
      return map_array(type, at);
    case H5T_VLEN:
      return map_sequence(type, at);
    case H5T_COMPOUND:
      return map_compound(type, at);
    case H5T_REFERENCE:
      refuse(at, type, "references point at objects inside the file; they are not data");
    case H5T_OPAQUE:
      refuse(at, type, "opaque bytes have no type to record");
    case H5T_BITFIELD:
      refuse(at, type, "bitfields have no numpy type");
    default:
      refuse(at, type, "HDF5 has no conversion of it to a numpy type");
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
      return "variable-length sequence";
    case H5T_ARRAY:
      return "array";
    default:
      return "unknown";
  }
}

bool is_ieee(hid_t type) {
  for (hid_t ieee : {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_IEEE_F32BE, H5T_IEEE_F64BE}) {
    if (H5Tequal(type, ieee) > 0) return true;
  }
  return false;
}

}  // namespace

bool same_element(const ElementType& a, const ElementType& b) {
  const auto member_key = [](const FieldMember& m) {
    return std::tie(m.name, m.dtype, m.offset, m.shape);
  };
  const auto enum_key = [](const EnumName& e) { return std::tie(e.name, e.value); };
  return a.dtype == b.dtype && a.shape == b.shape && a.variable == b.variable &&
         a.encoding == b.encoding &&
         std::ranges::equal(a.members, b.members, {}, member_key, member_key) &&
         std::ranges::equal(a.enum_names, b.enum_names, {}, enum_key, enum_key);
}

ElementType element_type(hid_t type, const std::string& path, const std::string& file) {
  return map_type(type, {path, file, ""}).element;
}

H5Handle memory_type(hid_t file_type, const std::string& file) {
  const std::string path = "(decoding)";
  return map_type(file_type, {path, file, ""}).memory;
}

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) return "variable-length string";
  std::string name;
  if (cls == H5T_INTEGER) {
    name = fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_2 ? "" : "u", size * 8);
    if (H5Tget_precision(type) != size * 8)
      name += fmt::format(" of {} bits", H5Tget_precision(type));
  } else if (cls == H5T_FLOAT && is_ieee(type)) {
    name = fmt::format("float{}", size * 8);
  } else {
    name = fmt::format("{} of {} bytes", class_name(cls), size);
    if (cls == H5T_FLOAT && H5Tget_order(type) == H5T_ORDER_VAX) name += " (VAX)";
  }
  if (size > 1 && (cls == H5T_INTEGER || cls == H5T_FLOAT) && H5Tget_order(type) == H5T_ORDER_BE) {
    name += " big-endian";
  }
  return name;
}

MemberPath split_member(hid_t file, const std::string& path) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos ||
      path_exists(file, path)) {
    return {path, ""};
  }
  auto dataset = path.substr(0, dot);
  if (!path_exists(file, dataset)) return {path, ""};
  return {std::move(dataset), path.substr(dot + 1)};
}

MemberType member_type(hid_t type, const std::string& member, const std::string& path,
                       const std::string& file) {
  const Where at{path, file, ""};
  const int index =
      H5Tget_class(type) == H5T_COMPOUND ? H5Tget_member_index(type, member.c_str()) : -1;
  if (index < 0) {
    std::string names;
    if (H5Tget_class(type) == H5T_COMPOUND) {
      for (const auto& m : members_of(type, at)) names += (names.empty() ? "" : ", ") + m.name;
    }
    throw UsageError(
        fmt::format("dataset {} in {} ({}) has no member '{}'{}", path, file, describe_type(type),
                    member, names.empty() ? "" : " (members: " + names + ")"),
        {.file = file});
  }
  const auto i = static_cast<unsigned>(index);
  auto stored = own_type(H5Tget_member_type(type, i), at, "H5Tget_member_type");
  auto mapped = map_type(stored.get(), {path, file, member});
  if (mapped.element.variable) {
    refuse({path, file, member}, type, "a variable-length member cannot be its own field");
  }
  auto memory = record_type(mapped.element.bytes, at);
  h5_check(H5Tinsert(memory.get(), member.c_str(), 0, mapped.memory.get()), "H5Tinsert", file);
  return {std::move(mapped.element), H5Tget_member_offset(type, i), std::move(memory)};
}

bool variable_length(hid_t mem_type) {
  return H5Tget_class(mem_type) == H5T_VLEN || H5Tis_variable_str(mem_type) > 0;
}

VlenBuffer::VlenBuffer(hid_t mem_type, uint64_t count, const std::string& file)
    : m_mem_type(mem_type),
      m_string(H5Tget_class(mem_type) == H5T_STRING),
      m_item_bytes(1),
      m_buffer(count * H5Tget_size(mem_type)) {
  if (!m_string) {
    auto item = h5_own(H5Tget_super(mem_type), H5Tclose, "H5Tget_super", file);
    m_item_bytes = H5Tget_size(item.get());
  }
  hsize_t n = count;
  m_space = h5_own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", file);
}

VlenBuffer::~VlenBuffer() {
  // The buffer starts zeroed, so elements a failed read never filled are null and free nothing.
  H5Dvlen_reclaim(m_mem_type, m_space.get(), H5P_DEFAULT, m_buffer.data());
}

std::span<const std::byte> VlenBuffer::element(uint64_t i) const {
  if (m_string) {
    const char* s = nullptr;
    std::memcpy(&s, m_buffer.data() + i * sizeof s, sizeof s);
    return s == nullptr ? std::span<const std::byte>{}
                        : std::span(reinterpret_cast<const std::byte*>(s), std::strlen(s));
  }
  hvl_t v{};
  std::memcpy(&v, m_buffer.data() + i * sizeof v, sizeof v);
  return {static_cast<const std::byte*>(v.p), v.len * m_item_bytes};
}

}  // namespace ddstage::formats::detail
