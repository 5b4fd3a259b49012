#include "zip_directory.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstring>
#include <optional>

#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace {

constexpr uint32_t end_signature = 0x06054b50;
constexpr uint32_t zip64_end_signature = 0x06064b50;
constexpr uint32_t zip64_locator_signature = 0x07064b50;
constexpr uint32_t central_signature = 0x02014b50;
constexpr uint32_t local_signature = 0x04034b50;
constexpr uint64_t end_bytes = 22;
constexpr uint64_t zip64_end_bytes = 56;
constexpr uint64_t zip64_locator_bytes = 20;
constexpr uint64_t central_bytes = 46;
constexpr uint64_t local_bytes = 30;
// zipfile (numpy's reader) looks for the end record this far from the end of the file.
constexpr uint64_t max_tail = end_bytes + (1u << 16);

[[noreturn]] void invalid_zip(const std::string& name, const std::string& reason) {
  throw UsageError(fmt::format("{} is not a valid zip archive: {}", name, reason), {.file = name});
}

/// Little-endian fields of a record, bounds-checked against the bytes read.
class Fields {
 public:
  Fields(std::span<const std::byte> bytes, const std::string& name)
      : m_bytes(bytes), m_name(name) {}
  uint64_t get(uint64_t at, unsigned width) const {
    if (at > m_bytes.size() || width > m_bytes.size() - at)
      invalid_zip(m_name, "a record is cut short");
    uint64_t value = 0;
    for (unsigned i = width; i-- > 0;)
      value = (value << 8) | std::to_integer<uint64_t>(m_bytes[at + i]);
    return value;
  }
  uint16_t u16(uint64_t at) const { return static_cast<uint16_t>(get(at, 2)); }
  uint32_t u32(uint64_t at) const { return static_cast<uint32_t>(get(at, 4)); }
  uint64_t u64(uint64_t at) const { return get(at, 8); }
  std::string_view text(uint64_t at, uint64_t length) const {
    if (at > m_bytes.size() || length > m_bytes.size() - at)
      invalid_zip(m_name, "a record is cut short");
    return {reinterpret_cast<const char*>(m_bytes.data()) + at, length};
  }

 private:
  std::span<const std::byte> m_bytes;
  const std::string& m_name;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;  ///< where the directory lies in this file
  /// Added to every offset the archive records to find it in this file: nonzero when bytes were
  /// prepended or archives concatenated (`cat a.npz b.npz`). Unsigned arithmetic wraps, so a
  /// shifted offset that would lie before the file comes out past the directory, and is refused.
  uint64_t shift = 0;
};

std::vector<std::byte> read(const ReadAt& read_at, uint64_t offset, uint64_t length) {
  std::vector<std::byte> bytes(length);
  // An empty directory (an archive of no members) reads nothing: no call with a null buffer.
  if (length > 0) read_at(bytes, offset);
  return bytes;
}

/// The end of central directory record and the directory it describes, found as Python's
/// zipfile finds them, so that an archive means to ddstage what it means to numpy.load: the end
/// record is the last 22 bytes when they are one without a comment, else the last signature in
/// the tail; a zip64 end record lies right before the zip64 locator, which lies right before the
/// end record; the directory lies right before those, wherever its recorded offset says.
Directory find_directory(uint64_t file_size, const ReadAt& read_at, const std::string& name) {
  if (file_size < end_bytes)
    invalid_zip(name, "it is too short to hold an end of central directory");
  const uint64_t tail_offset = file_size - std::min(file_size, max_tail);
  const auto tail = read(read_at, tail_offset, file_size - tail_offset);
  const Fields tail_fields(tail, name);
  std::optional<uint64_t> end;
  const uint64_t last = tail.size() - end_bytes;
  if (tail_fields.u32(last) == end_signature && tail_fields.u16(last + 20) == 0) {
    end = last;
  } else {
    for (uint64_t at = tail.size() - 4 + 1; at-- > 0;) {
      if (tail_fields.u32(at) == end_signature) {
        end = at;
        break;
      }
    }
  }
  if (!end) invalid_zip(name, "it has no end of central directory record");
  const Fields e(std::span<const std::byte>(tail).subspan(*end), name);
  if (e.u16(4) != 0 || e.u16(6) != 0) invalid_zip(name, "it spans several disks");
  Directory d{.entries = e.u16(10), .size = e.u32(12), .offset = e.u32(16)};
  const uint64_t end_offset = tail_offset + *end;
  // Where the directory ends: the end record, or the zip64 end record before it. Zip64 fields
  // replace the 16- and 32-bit ones (numpy writes them past 65535 members or 4 GiB).
  uint64_t directory_end = end_offset;
  if (end_offset >= zip64_locator_bytes) {
    const auto locator = read(read_at, end_offset - zip64_locator_bytes, zip64_locator_bytes);
    const Fields l(locator, name);
    if (l.u32(0) == zip64_locator_signature) {
      if (l.u32(4) != 0 || l.u32(16) > 1) invalid_zip(name, "it spans several disks");
      if (end_offset < zip64_locator_bytes + zip64_end_bytes)
        invalid_zip(name, "its zip64 end record lies outside the archive");
      directory_end = end_offset - zip64_locator_bytes - zip64_end_bytes;
      const auto record = read(read_at, directory_end, zip64_end_bytes);
      const Fields z(record, name);
      if (z.u32(0) != zip64_end_signature)
        invalid_zip(name, "its zip64 locator follows no zip64 end record");
      if (z.u32(16) != 0 || z.u32(20) != 0) invalid_zip(name, "it spans several disks");
      d = {.entries = z.u64(32), .size = z.u64(40), .offset = z.u64(48)};
    }
  }
  if (d.size > directory_end) invalid_zip(name, "its central directory lies outside the archive");
  const uint64_t recorded = d.offset;
  d.offset = directory_end - d.size;
  d.shift = d.offset - recorded;
  if (d.entries > d.size / central_bytes)
    invalid_zip(name, fmt::format("its central directory of {} bytes cannot hold {} members",
                                  d.size, d.entries));
  return d;
}

/// The zip64 extended information extra field replaces, in order, each of the three sizes
/// and offsets that is 0xffffffff in the fixed part.
void apply_zip64_extra(const Fields& f, uint64_t at, uint64_t length, ZipMember& m,
                       const std::string& name) {
  const uint64_t end = at + length;
  while (at + 4 <= end) {
    const uint16_t id = f.u16(at);
    const uint16_t size = f.u16(at + 2);
    if (size > end - at - 4)
      invalid_zip(name, fmt::format("member '{}' has a cut extra field", m.name));
    if (id == 0x0001) {
      uint64_t p = at + 4;
      for (uint64_t* value : {&m.size, &m.compressed_size, &m.header_offset}) {
        if (*value != 0xffffffff) continue;
        if (p + 8 > at + 4 + size)
          invalid_zip(name, fmt::format("member '{}' has a zip64 field too short", m.name));
        *value = f.u64(p);
        p += 8;
      }
    }
    at += 4 + size;
  }
}

ZipMember parse_central(const Fields& f, uint64_t& at, const std::string& name) {
  if (f.u32(at) != central_signature)
    invalid_zip(name, "a central directory entry has a bad signature");
  ZipMember m{.flags = f.u16(at + 8),
              .method = f.u16(at + 10),
              .crc32 = f.u32(at + 16),
              .compressed_size = f.u32(at + 20),
              .size = f.u32(at + 24),
              .header_offset = f.u32(at + 42)};
  const uint16_t name_length = f.u16(at + 28);
  const uint16_t extra_length = f.u16(at + 30);
  const uint16_t comment_length = f.u16(at + 32);
  m.name = f.text(at + central_bytes, name_length);
  if (std::any_of(m.name.begin(), m.name.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
    invalid_zip(name, "a member name has control characters");
  f.text(at + central_bytes + name_length, uint64_t{extra_length} + comment_length);
  apply_zip64_extra(f, at + central_bytes + name_length, extra_length, m, name);
  at += central_bytes + name_length + extra_length + comment_length;
  return m;
}

/// The local header must agree with the directory; the data starts after its own (possibly
/// different) extra field.
void locate_data(ZipMember& m, const Directory& d, const ReadAt& read_at, const std::string& name) {
  const auto where = [&] { return fmt::format("member '{}'", m.name); };
  m.header_offset += d.shift;
  const uint64_t directory_offset = d.offset;
  if (m.header_offset > directory_offset ||
      directory_offset - m.header_offset < local_bytes + m.name.size())
    invalid_zip(name, where() + " has its local header outside the archive");
  const auto header = read(read_at, m.header_offset, local_bytes + m.name.size());
  const Fields l(header, name);
  if (l.u32(0) != local_signature)
    invalid_zip(name, where() + " has no local header at its offset");
  if (l.u16(8) != m.method)
    invalid_zip(name, where() + " has a local header that disagrees on the compression method");
  if (l.text(local_bytes, l.u16(26)) != m.name)
    invalid_zip(name, where() + " has a local header with another name");
  m.data_offset = m.header_offset + local_bytes + l.u16(26) + l.u16(28);
  if (m.data_offset > directory_offset || m.compressed_size > directory_offset - m.data_offset)
    invalid_zip(name, where() + " runs past the start of the central directory");
}

}  // namespace

std::vector<ZipMember> read_zip_directory(uint64_t file_size, const ReadAt& read_at,
                                          const std::string& name) {
  const Directory d = find_directory(file_size, read_at, name);
  const auto bytes = read(read_at, d.offset, d.size);
  const Fields f(bytes, name);
  std::vector<ZipMember> members;
  uint64_t at = 0;
  while (members.size() < d.entries) {
    members.push_back(parse_central(f, at, name));
    locate_data(members.back(), d, read_at, name);
  }
  if (at != d.size) {
    invalid_zip(name, fmt::format("its central directory has {} bytes after its {} members",
                                  d.size - at, d.entries));
  }
  // zipfile (numpy.load) refuses a member whose data runs into the next local header: members
  // that share bytes are a zip bomb's trick, never what numpy writes.
  std::vector<const ZipMember*> by_offset;
  for (const auto& m : members) by_offset.push_back(&m);
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipMember* a, const ZipMember* b) {
    return a->header_offset > b->header_offset;
  });
  uint64_t next = d.offset;
  for (const ZipMember* m : by_offset) {
    if (m->data_offset > next || m->compressed_size > next - m->data_offset)
      invalid_zip(name, fmt::format("member '{}' overlaps the next member", m->name));
    next = m->header_offset;
  }
  return members;
}

}  // namespace ddstage::formats
