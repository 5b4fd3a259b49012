#include "npy_header.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
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

  PyValue parse_string(char quote) {
    PyValue value{.kind = PyValue::Kind::string};
    ++m_pos;
    while (m_pos < m_text.size() && m_text[m_pos] != quote) {
      if (m_text[m_pos] == '\\' && m_pos + 1 < m_text.size()) ++m_pos;  // escaped character
      value.text += m_text[m_pos++];
    }
    if (m_pos == m_text.size()) fail("unterminated string");
    ++m_pos;
    return value;
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

/// The DType for a numpy descr such as "<f4", or nullopt when ddstage has none.
std::optional<DType> numpy_dtype(std::string_view descr) {
  struct Code {
    std::string_view code;
    DType type;
  };
  static constexpr std::array<Code, 12> codes = {{
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
  }};
  if (descr.size() != 3) return std::nullopt;
  for (const auto& c : codes) {
    if (descr.substr(1) != c.code) continue;
    // Byte order means nothing for one-byte types, so numpy's '>u1' is as good as '|u1'.
    const bool ok = descr[0] == '<' || descr[0] == '=' || descr[0] == '|' ||
                    (descr[0] == '>' && dtype_size(c.type) == 1);
    return ok ? std::optional(c.type) : std::nullopt;
  }
  return std::nullopt;
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
  p.header_end = p.dict_begin + length;
  return p;
}

/// row_bytes and data_bytes from shape and item size, refusing products that overflow.
void compute_sizes(NpyHeader& h, const std::string& name) {
  h.row_bytes = dtype_size(h.dtype);
  for (size_t d = 1; d < h.shape.size(); ++d) {
    if (__builtin_mul_overflow(h.row_bytes, h.shape[d], &h.row_bytes))
      invalid(name, "shape is too large");
  }
  h.data_bytes = h.row_bytes;
  if (!h.shape.empty() && __builtin_mul_overflow(h.row_bytes, h.shape[0], &h.data_bytes)) {
    invalid(name, "shape is too large");
  }
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& name) {
  const Preamble p = parse_preamble(bytes, name);
  if (bytes.size() < p.header_end) invalid(name, "the file ends inside the header");
  const std::string_view dict_text(reinterpret_cast<const char*>(bytes.data()) + p.dict_begin,
                                   p.header_end - p.dict_begin);
  const auto dict = LiteralParser(dict_text, name).parse_dict();

  NpyHeader h{.major = p.major, .minor = p.minor, .data_offset = p.header_end};
  const auto descr = dict.find("descr");
  if (descr == dict.end()) invalid(name, "the header has no 'descr'");
  const bool is_string = descr->second.kind == PyValue::Kind::string;
  const auto dtype = is_string ? numpy_dtype(descr->second.text) : std::nullopt;
  if (!dtype) {
    throw UsageError(fmt::format("{}: unsupported dtype '{}' (supported: {})", name,
                                 printable(is_string ? descr->second.text : descr->second.raw),
                                 supported_dtypes()),
                     {.file = name});
  }
  h.dtype = *dtype;
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

NpyHeader read_npy_header(const FileDescriptor& fd) {
  const std::string name = fd.path().string();
  const uint64_t size = fd.size();
  std::vector<std::byte> bytes(std::min<uint64_t>(size, 12));
  fd.pread_exact(bytes, 0);
  const uint64_t header_end = parse_preamble(bytes, name).header_end;
  if (header_end > size) invalid(name, "the file ends inside the header");
  bytes.resize(header_end);
  fd.pread_exact(bytes, 0);
  return parse_npy_header(bytes, name);
}

}  // namespace ddstage::formats
