#include "npy_header.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace {

// '=' (native) and multi-byte '|' descrs are taken as little-endian, like the index itself.
static_assert(std::endian::native == std::endian::little, "ddstage assumes a little-endian host");

// Only guards the allocation against a corrupt length field: real headers are under a few KiB.
constexpr uint64_t max_header_bytes = 16ull << 20;
// Nesting numpy writes is at most a few levels (structured dtypes); deeper input is garbage.
constexpr int max_nesting = 32;

/// Appends code point cp (at most U+10FFFF, not a surrogate) as UTF-8.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

/// Format 1.0 and 2.0 headers are latin-1 (numpy writes 3.0, UTF-8, for names latin-1 cannot
/// hold): every name ddstage keeps is UTF-8.
std::string latin1_to_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) append_utf8(out, static_cast<unsigned char>(c));
  return out;
}

/// Header text quoted in a message, with control bytes replaced so the error stays one line.
std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return out;
}

[[noreturn]] void invalid(const std::string& name, const std::string& reason) {
  throw UsageError(fmt::format("{} is not a valid .npy file: {}", name, printable(reason)),
                   {.file = name});
}

/// A Python literal from the header dict, as far as .npy headers use them.
struct PyValue {
  enum class Kind { string, integer, boolean, none, sequence };
  Kind kind = Kind::none;
  std::string_view raw;  // the literal as written, for error messages
  std::string text;      // contents of a string
  uint64_t integer = 0;
  bool boolean = false;
  std::vector<PyValue> items;  // elements of a tuple or list
};

/// Recursive-descent parser for the dict numpy writes with repr(): strings, integers (with
/// Python 2's 'L' suffix), True/False/None, tuples and lists. Failures name the file.
class LiteralParser {
 public:
  LiteralParser(std::string_view text, const std::string& name) : m_text(text), m_name(name) {}

  /// The whole text must be one dict with string keys, then only whitespace or padding.
  std::map<std::string, PyValue> parse_dict() {
    std::map<std::string, PyValue> dict;
    expect('{');
    while (!consume('}')) {
      PyValue key = parse_value(1);
      if (key.kind != PyValue::Kind::string)
        fail(fmt::format("dict key {} is not a string", key.raw));
      expect(':');
      dict[key.text] = parse_value(1);
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (m_pos != m_text.size()) fail("unexpected text after the header dict");
    return dict;
  }

 private:
  PyValue parse_value(int depth) {
    if (depth > max_nesting) fail("header nests too deeply");
    skip_space();
    const size_t begin = m_pos;
    PyValue value;
    const char c = peek();
    if (c == '\'' || c == '"') {
      value = parse_string(c);
    } else if (c == '(' || c == '[') {
      value = parse_sequence(c == '(' ? ')' : ']', depth);
    } else if (c >= '0' && c <= '9') {
      value = parse_integer();
    } else {
      value = parse_word();
    }
    value.raw = m_text.substr(begin, m_pos - begin);
    return value;
  }

  /// A str literal as numpy writes one (repr() of a member name): the escapes repr() uses are
  /// decoded, so a name comes out as the UTF-8 text numpy's own reader gives.
  PyValue parse_string(char quote) {
    PyValue value{.kind = PyValue::Kind::string};
    ++m_pos;
    while (m_pos < m_text.size() && m_text[m_pos] != quote) {
      if (m_text[m_pos] != '\\' || m_pos + 1 == m_text.size()) {
        value.text += m_text[m_pos++];
        continue;
      }
      const char e = m_text[m_pos + 1];
      m_pos += 2;
      switch (e) {
        case 'n':
          value.text += '\n';
          break;
        case 't':
          value.text += '\t';
          break;
        case 'r':
          value.text += '\r';
          break;
        case 'x':
          append_utf8(value.text, parse_hex(2));
          break;
        case 'u':
          append_utf8(value.text, parse_hex(4));
          break;
        case 'U':
          append_utf8(value.text, parse_hex(8));
          break;
        case '\\':
        case '\'':
        case '"':
          value.text += e;
          break;
        default:  // Python keeps an unknown escape as it is
          value.text += '\\';
          value.text += e;
      }
    }
    if (m_pos == m_text.size()) fail("unterminated string");
    ++m_pos;
    return value;
  }

  uint32_t parse_hex(std::size_t digits) {
    if (m_pos + digits > m_text.size()) fail("a \\x, \\u or \\U escape is cut short");
    uint32_t cp = 0;
    for (std::size_t i = 0; i < digits; ++i) {
      const char c = m_text[m_pos++];
      const int v = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (v < 0) fail("a \\x, \\u or \\U escape has a non-hex digit");
      cp = cp << 4 | static_cast<uint32_t>(v);
    }
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      fail("an escape names no Unicode character");
    return cp;
  }

  PyValue parse_sequence(char close, int depth) {
    PyValue value{.kind = PyValue::Kind::sequence};
    ++m_pos;
    while (!consume(close)) {
      value.items.push_back(parse_value(depth + 1));
      if (!consume(',')) {
        expect(close);
        break;
      }
    }
    return value;
  }

  PyValue parse_integer() {
    PyValue value{.kind = PyValue::Kind::integer};
    while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(m_text[m_pos++] - '0');
      if (value.integer > (UINT64_MAX - digit) / 10) fail("integer too large");
      value.integer = value.integer * 10 + digit;
    }
    if (m_pos < m_text.size() && (m_text[m_pos] == 'L' || m_text[m_pos] == 'l')) ++m_pos;
    return value;
  }

  PyValue parse_word() {
    const size_t begin = m_pos;
    while (m_pos < m_text.size() && std::isalpha(static_cast<unsigned char>(m_text[m_pos])))
      ++m_pos;
    const auto word = m_text.substr(begin, m_pos - begin);
    if (word == "True" || word == "False") {
      return PyValue{.kind = PyValue::Kind::boolean, .boolean = word == "True"};
    }
    if (word == "None") return PyValue{.kind = PyValue::Kind::none};
    if (!word.empty()) fail(fmt::format("unexpected '{}' at position {}", word, begin));
    if (m_pos == m_text.size()) fail("the header ends in the middle of a value");
    fail(fmt::format("unexpected '{}' at position {}", m_text[m_pos], m_pos));
  }

  void skip_space() {
    constexpr std::string_view space = " \t\r\n";
    while (m_pos < m_text.size() && space.find(m_text[m_pos]) != std::string_view::npos) ++m_pos;
  }
  char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
  bool consume(char c) {
    skip_space();
    if (peek() != c) return false;
    ++m_pos;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) {
      fail(m_pos < m_text.size() ? fmt::format("expected '{}' at position {}", c, m_pos)
                                 : fmt::format("header ends where '{}' was expected", c));
    }
  }
  [[noreturn]] void fail(const std::string& reason) const { invalid(m_name, reason); }

  std::string_view m_text;
  size_t m_pos = 0;
  const std::string& m_name;
};

/// One numpy element type ("<f4", "|S8", "<U3", ">M8[ns]") in ddstage's terms.
struct Element {
  DType dtype = DType::uint8;
  uint64_t bytes = 0;          // numpy's itemsize
  std::vector<uint64_t> axes;  // the extra axis of a string, a void or 'U<n>'
  std::string encoding;        // "ascii" for 'S<n>'
  uint32_t swap_width = 0;     // nonzero when big-endian with elements of this many bytes
  bool foreign = false;        // ddstage's dtype is not numpy's ('U', datetimes)
};

[[noreturn]] void unsupported(const std::string& name, const std::string& what,
                              std::string_view descr, const std::string& reason) {
  throw UsageError(
      fmt::format("{}: {}unsupported dtype '{}' ({})", name, what, printable(descr), reason),
      {.file = name});
}

/// The element type of a numpy type string; `what` says which member, for messages.
Element parse_element(std::string_view descr, const std::string& name, const std::string& what) {
  struct Code {
    std::string_view code;
    DType type;
  };
  static constexpr std::array<Code, 14> codes = {{
      {"b1", DType::boolean},
      {"i1", DType::int8},
      {"i2", DType::int16},
      {"i4", DType::int32},
      {"i8", DType::int64},
      {"u1", DType::uint8},
      {"u2", DType::uint16},
      {"u4", DType::uint32},
      {"u8", DType::uint64},
      {"f2", DType::float16},
      {"f4", DType::float32},
      {"f8", DType::float64},
      {"c8", DType::complex64},
      {"c16", DType::complex128},
  }};
  const auto supported = [&] {
    return fmt::format(
        "supported: bool, int8-64, uint8-64, float16/32/64, complex64/128 in either byte "
        "order, S<n>, V<n>, U<n>, M8, m8, one level of records; as ddstage dtypes: {}",
        supported_dtypes());
  };
  if (descr.empty() || std::string_view("<>=|").find(descr[0]) == std::string_view::npos) {
    unsupported(name, what, descr, supported());
  }
  const bool big = descr[0] == '>';
  const std::string_view code = descr.substr(1);
  if (code == "O") {
    unsupported(name, what, descr,
                "pickled Python objects: ddstage cannot index them; store them as fixed-size "
                "or bytes");
  }
  Element e;
  for (const auto& c : codes) {
    if (code != c.code) continue;
    e.dtype = c.type;
    e.bytes = dtype_size(c.type);
    // A complex number is two floats, each swapped on its own.
    const bool complex = c.type == DType::complex64 || c.type == DType::complex128;
    const uint64_t width = complex ? e.bytes / 2 : e.bytes;
    if (big && width > 1) e.swap_width = static_cast<uint32_t>(width);
    return e;
  }
  // Datetimes and timedeltas are int64 counts of the unit in brackets.
  if (code.starts_with("M8") || code.starts_with("m8")) {
    const auto unit = code.substr(2);
    if (!unit.empty() && (unit.front() != '[' || unit.back() != ']'))
      unsupported(name, what, descr, supported());
    e = Element{.dtype = DType::int64, .bytes = 8, .foreign = true};
    if (big) e.swap_width = 8;
    return e;
  }
  if (code.size() >= 2 && (code[0] == 'S' || code[0] == 'V' || code[0] == 'U') &&
      code.find_first_not_of("0123456789", 1) == std::string_view::npos && code.size() < 12) {
    uint64_t n = 0;
    for (char digit : code.substr(1)) n = n * 10 + static_cast<uint64_t>(digit - '0');
    if (n == 0) unsupported(name, what, descr, "a zero-length string has no bytes to index");
    e.axes = {n};
    if (code[0] == 'U') {
      // UCS-4 code points: numpy's bytes exactly, viewable as '<U<n>' again.
      e.dtype = DType::uint32;
      e.bytes = 4 * n;
      e.foreign = true;
      if (big) e.swap_width = 4;
    } else {
      e.dtype = DType::bytes;
      e.bytes = n;
      if (code[0] == 'S') e.encoding = "ascii";
    }
    return e;
  }
  unsupported(name, what, descr, supported());
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& name) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) invalid(name, "shape is too large");
  return product;
}

/// A structured descr: a list of (name, type) or (name, type, shape) tuples in offset order,
/// padding being unnamed voids. One level only: a member that is itself a record is refused.
void parse_record(const PyValue& list, const std::string& name, NpyHeader& h) {
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& item : list.items) {
    if (item.kind != PyValue::Kind::sequence || item.items.size() < 2 || item.items.size() > 3)
      invalid(name, fmt::format("descr entry {} is not (name, type[, shape])", item.raw));
    const PyValue* title = &item.items[0];
    // (title, name) pairs: numpy writes a titled member so; the name is what indexes it.
    if (title->kind == PyValue::Kind::sequence && title->items.size() == 2)
      title = &title->items[1];
    if (title->kind != PyValue::Kind::string)
      invalid(name, fmt::format("descr entry {} has no member name", item.raw));
    const std::string member = title->text;
    const std::string what = fmt::format("member '{}' has ", printable(member));
    const PyValue& type = item.items[1];
    if (type.kind == PyValue::Kind::sequence) {
      throw UsageError(fmt::format("{}: member '{}' is itself a record (a nested structured "
                                   "dtype); ddstage keeps one level of members: save it with "
                                   "numpy.lib.recfunctions.structured_to_unstructured or "
                                   "as separate arrays",
                                   name, printable(member)),
                       {.file = name});
    }
    if (type.kind != PyValue::Kind::string)
      invalid(name, fmt::format("descr entry {} has no type string", item.raw));
    Element e = parse_element(type.text, name, what);
    std::vector<uint64_t> shape;
    uint64_t elements = 1;
    if (item.items.size() == 3) {
      if (item.items[2].kind != PyValue::Kind::sequence)
        invalid(name, fmt::format("descr entry {} has a shape that is not a tuple", item.raw));
      for (const auto& dim : item.items[2].items) {
        if (dim.kind != PyValue::Kind::integer)
          invalid(name, fmt::format("descr entry {} has a non-integer dimension", item.raw));
        shape.push_back(dim.integer);
        elements = checked_mul(elements, dim.integer, name);
      }
    }
    const uint64_t size = checked_mul(elements, e.bytes, name);
    if (member.empty() && e.dtype == DType::bytes && e.encoding.empty()) {
      // Padding numpy adds for alignment or a larger itemsize: bytes of no member.
    } else {
      if (member.empty() || !names.insert(member).second)
        invalid(name, fmt::format("descr has an empty or repeated member name in {}", item.raw));
      if (e.foreign) h.numpy_descr = list.raw;
      if (e.swap_width) {
        h.swaps.push_back({.offset = offset,
                           .width = e.swap_width,
                           .count = checked_mul(elements, e.bytes / e.swap_width, name)});
      }
      shape.insert(shape.end(), e.axes.begin(), e.axes.end());
      h.members.push_back(
          FieldMember{.name = member, .dtype = e.dtype, .offset = offset, .shape = shape});
    }
    if (__builtin_add_overflow(offset, size, &offset)) invalid(name, "shape is too large");
  }
  if (h.members.empty() || offset == 0) {
    throw UsageError(fmt::format("{}: the structured dtype {} has no members with bytes", name,
                                 printable(list.raw)),
                     {.file = name});
  }
  h.dtype = DType::structured;
  h.item_bytes = offset;
  h.item_axes = {offset};
}

/// Fills the element type of h from the header's 'descr'.
void parse_descr(const PyValue& descr, const std::string& name, NpyHeader& h) {
  if (descr.kind == PyValue::Kind::sequence) return parse_record(descr, name, h);
  if (descr.kind != PyValue::Kind::string) unsupported(name, "", descr.raw, "not a type string");
  const Element e = parse_element(descr.text, name, "");
  h.dtype = e.dtype;
  h.item_bytes = e.bytes;
  h.item_axes = e.axes;
  h.encoding = e.encoding;
  if (e.foreign) h.numpy_descr = descr.text;
  if (e.swap_width) h.swaps.push_back({.width = e.swap_width, .count = e.bytes / e.swap_width});
}

const PyValue& require(const std::map<std::string, PyValue>& dict, const std::string& key,
                       PyValue::Kind kind, const std::string& name) {
  const auto it = dict.find(key);
  if (it == dict.end()) invalid(name, fmt::format("the header has no '{}'", key));
  if (it->second.kind != kind) {
    const char* wanted = kind == PyValue::Kind::boolean ? "True or False" : "a tuple";
    invalid(name, fmt::format("'{}' is {}, not {}", key, it->second.raw, wanted));
  }
  return it->second;
}

struct Preamble {
  uint8_t major = 0;
  uint8_t minor = 0;
  uint64_t dict_begin = 0;
  uint64_t header_end = 0;
};

uint64_t read_le(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;)
    value = (value << 8) | std::to_integer<uint64_t>(bytes[i]);
  return value;
}

/// Magic, version and header length: the fixed-size part before the dict.
Preamble parse_preamble(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), npy_magic.data(), npy_magic.size()) != 0) {
    invalid(name, "it does not start with the \\x93NUMPY magic");
  }
  Preamble p{.major = std::to_integer<uint8_t>(bytes[6]),
             .minor = std::to_integer<uint8_t>(bytes[7])};
  if (p.major < 1 || p.major > 3 || p.minor != 0) {
    invalid(name, fmt::format("format version {}.{} is not supported (supported: 1.0, 2.0, 3.0)",
                              p.major, p.minor));
  }
  // Version 1 has a 2-byte header length; 2.0 and 3.0 widened it to 4 bytes.
  const size_t length_bytes = p.major == 1 ? 2 : 4;
  p.dict_begin = 8 + length_bytes;
  if (bytes.size() < p.dict_begin) invalid(name, "the file ends inside the header");
  const uint64_t length = read_le(bytes.subspan(8, length_bytes));
  if (length > max_header_bytes)
    invalid(name, fmt::format("header length {} is implausible", length));
  // The smallest dict, "{}", is 2 bytes: this keeps header_end >= npy_preamble_bytes, which
  // callers rely on when they read the rest of the header after the preamble.
  if (length < 2) invalid(name, fmt::format("header length {} is too short", length));
  p.header_end = p.dict_begin + length;
  return p;
}

/// row_bytes and data_bytes from shape and item size, refusing products that overflow.
void compute_sizes(NpyHeader& h, const std::string& name) {
  h.row_bytes = h.item_bytes;
  for (size_t d = 1; d < h.shape.size(); ++d)
    h.row_bytes = checked_mul(h.row_bytes, h.shape[d], name);
  h.data_bytes = h.row_bytes;
  if (!h.shape.empty() && __builtin_mul_overflow(h.row_bytes, h.shape[0], &h.data_bytes)) {
    invalid(name, "shape is too large");
  }
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name) {
  const Preamble p = parse_preamble(bytes, name);
  if (bytes.size() < p.header_end) invalid(name, "the file ends inside the header");
  const std::string_view raw(reinterpret_cast<const char*>(bytes.data()) + p.dict_begin,
                             p.header_end - p.dict_begin);
  const std::string dict_text = p.major < 3 ? latin1_to_utf8(raw) : std::string(raw);
  const auto dict = LiteralParser(dict_text, name).parse_dict();

  NpyHeader h{.major = p.major, .minor = p.minor, .data_offset = p.header_end};
  const auto descr = dict.find("descr");
  if (descr == dict.end()) invalid(name, "the header has no 'descr'");
  parse_descr(descr->second, name, h);
  h.fortran_order = require(dict, "fortran_order", PyValue::Kind::boolean, name).boolean;
  for (const auto& dim : require(dict, "shape", PyValue::Kind::sequence, name).items) {
    if (dim.kind != PyValue::Kind::integer)
      invalid(name, fmt::format("shape has a non-integer {}", dim.raw));
    h.shape.push_back(dim.integer);
  }
  compute_sizes(h, name);
  if (h.data_bytes > UINT64_MAX - h.data_offset) invalid(name, "shape is too large");
  return h;
}

uint64_t npy_header_end(std::span<const std::byte> bytes, const std::string& name) {
  return parse_preamble(bytes, name).header_end;
}

NpyHeader read_npy_header(const ReadNext& read_next, uint64_t limit, const std::string& name) {
  std::vector<std::byte> bytes(std::min<uint64_t>(limit, npy_preamble_bytes));
  read_next(bytes);
  const uint64_t header_end = npy_header_end(bytes, name);
  if (header_end > limit) invalid(name, "the file ends inside the header");
  // header_end >= npy_preamble_bytes >= bytes.size() (parse_preamble): only the rest is read.
  const size_t have = bytes.size();
  bytes.resize(header_end);
  read_next(std::span(bytes).subspan(have));
  return parse_npy_header(bytes, name);
}

NpyHeader read_npy_header(const FileDescriptor& fd, uint64_t offset, uint64_t limit,
                          const std::string& name) {
  uint64_t at = offset;
  const auto read_next = [&](std::span<std::byte> out) {
    fd.pread_exact(out, at);
    at += out.size();
  };
  NpyHeader h = read_npy_header(read_next, limit, name);
  h.data_offset += offset;
  if (h.data_bytes > UINT64_MAX - h.data_offset) invalid(name, "shape is too large");
  return h;
}

NpyHeader read_npy_header(const FileDescriptor& fd) {
  return read_npy_header(fd, 0, fd.size(), fd.path().string());
}

namespace {

template <typename Word, Word (*swap)(Word)>
void swap_words(std::byte* p, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i, p += sizeof(Word)) {
    Word w;
    std::memcpy(&w, p, sizeof w);
    w = swap(w);
    std::memcpy(p, &w, sizeof w);
  }
}

uint16_t bswap16(uint16_t w) {
  return __builtin_bswap16(w);
}
uint32_t bswap32(uint32_t w) {
  return __builtin_bswap32(w);
}
uint64_t bswap64(uint64_t w) {
  return __builtin_bswap64(w);
}

/// Reverses `count` consecutive elements of `width` bytes (2, 4 or 8: what parse_element makes).
void swap_run(std::byte* p, uint32_t width, uint64_t count) {
  switch (width) {
    case 2:
      return swap_words<uint16_t, bswap16>(p, count);
    case 4:
      return swap_words<uint32_t, bswap32>(p, count);
    default:
      return swap_words<uint64_t, bswap64>(p, count);
  }
}

}  // namespace

void NpyHeader::to_little_endian(std::span<std::byte> elements) const {
  if (swaps.empty() || item_bytes == 0) return;
  // A plain big-endian array is one run of equal elements: swap it without the per-item loop.
  if (swaps.size() == 1 && swaps[0].width * swaps[0].count == item_bytes) {
    return swap_run(elements.data(), swaps[0].width, elements.size() / swaps[0].width);
  }
  for (uint64_t item = 0; item + item_bytes <= elements.size(); item += item_bytes) {
    for (const auto& s : swaps) swap_run(elements.data() + item + s.offset, s.width, s.count);
  }
}

}  // namespace ddstage::formats
