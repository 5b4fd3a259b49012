#include "support/npy_header.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/error.hpp"

namespace ddstage::cli {
namespace {

/// Whether s is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xe  ? 3
                          : (c >> 3) == 0x1e ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

/// A Python string literal (numpy reads the header with ast.literal_eval): quotes and
/// backslashes escaped, control characters as \xNN so the header stays one line. Bytes past
/// ASCII pass as they are: the caller checked they are UTF-8 (header version 3.0).
std::string py_str(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "'";
}

/// "(3,)", "(2, 3)": a Python tuple.
std::string py_tuple(const std::vector<uint64_t>& dims) {
  return dims.size() == 1 ? fmt::format("({},)", dims[0])
                          : fmt::format("({})", fmt::join(dims, ", "));
}

std::string scalar_descr(DType t) {
  char kind = 'u';  // bytes: uint8, as the Python binding gives opaque bytes
  switch (t) {
    case DType::boolean:
      kind = 'b';
      break;
    case DType::int8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
      kind = 'i';
      break;
    case DType::float16:
    case DType::float32:
    case DType::float64:
      kind = 'f';
      break;
    case DType::complex64:
    case DType::complex128:
      kind = 'c';
      break;
    case DType::structured:
      throw UsageError("a record nested in a record has no .npy dtype here; write raw bytes");
    default:
      break;
  }
  const auto size = dtype_size(t);
  return fmt::format("{}{}{}", size == 1 ? '|' : '<', kind, size);
}

/// An element type and the axes it leaves: the index keeps a text length and a record size as
/// the last axis (every size is dtype_size() times the shape); numpy makes that axis part of
/// the element type (as python/src/batch.cpp does).
struct Element {
  std::string descr;
  std::vector<uint64_t> shape;
};

Element text_or_scalar(DType dtype, bool text, std::vector<uint64_t> shape) {
  if (dtype == DType::bytes && text && !shape.empty()) {
    const auto length = shape.back();
    shape.pop_back();
    return {fmt::format("'|S{}'", length), shape};
  }
  return {py_str(scalar_descr(dtype)), shape};
}

/// numpy's list-of-fields descr, with the gaps between members as unnamed void padding.
std::string record_descr(const FieldInfo& f) {
  auto members = f.members;
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<std::string> items;
  uint64_t at = 0;
  for (const auto& m : members) {
    if (!valid_utf8(m.name))
      throw UsageError("field '" + f.name +
                       "' has a member whose name is not UTF-8: a .npy header cannot hold it; "
                       "write raw bytes (-o FILE without .npy)");
    if (m.offset < at) throw UsageError("field '" + f.name + "' has overlapping members");
    if (m.offset > at) items.push_back(fmt::format("('', '|V{}')", m.offset - at));
    // A bytes member with a shape is a string, as in the Python binding's record dtype.
    const auto e = text_or_scalar(m.dtype, true, m.shape);
    uint64_t bytes =
        m.dtype == DType::bytes && !m.shape.empty() ? m.shape.back() : dtype_size(m.dtype);
    for (auto d : e.shape) bytes *= d;
    items.push_back(e.shape.empty()
                        ? fmt::format("({}, {})", py_str(m.name), e.descr)
                        : fmt::format("({}, {}, {})", py_str(m.name), e.descr, py_tuple(e.shape)));
    at = m.offset + bytes;
  }
  const uint64_t size = f.shape.back();
  if (at > size) throw UsageError("field '" + f.name + "' has members past its record size");
  if (at < size) items.push_back(fmt::format("('', '|V{}')", size - at));
  return fmt::format("[{}]", fmt::join(items, ", "));
}

}  // namespace

bool is_npy_path(const std::string& path) {
  return path.ends_with(".npy");
}

std::string npy_header(const FieldInfo& field, uint64_t rows) {
  if (field.variable) {
    throw UsageError("field '" + field.name +
                     "' has rows of different sizes: a .npy holds one shape; write raw bytes "
                     "(-o FILE without .npy) or read one sample at a time");
  }
  Element e;
  if (field.dtype == DType::structured) {
    e = {record_descr(field), {field.shape.begin(), field.shape.end() - 1}};
  } else {
    e = text_or_scalar(field.dtype, !field.encoding.empty(), field.shape);
  }
  e.shape.insert(e.shape.begin(), rows);
  std::string dict = fmt::format("{{'descr': {}, 'fortran_order': False, 'shape': {}, }}", e.descr,
                                 py_tuple(e.shape));
  const bool ascii = std::all_of(dict.begin(), dict.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  // Version 1.0 has a 2-byte header length; 2.0 a 4-byte one; 3.0 is 2.0 in UTF-8.
  const int major = !ascii ? 3 : dict.size() + 1 + 10 < 65536 ? 1 : 2;
  const std::size_t prefix = major == 1 ? 10 : 12;
  // numpy pads the header with spaces and a newline so the data starts 64-byte aligned.
  const std::size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const uint64_t length = dict.size();
  for (std::size_t b = 0; b < prefix - 8; ++b) out += static_cast<char>((length >> (8 * b)) & 0xff);
  return out + dict;
}

}  // namespace ddstage::cli
