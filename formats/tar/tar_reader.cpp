// A tar reader of our own rather than libarchive's: in-place indexing needs the exact offset of
// every member's data in the file, which libarchive's streaming API does not promise (it hides
// pax and GNU headers and reads ahead), and a parser of a few hundred lines is fully checked
// and fuzzed (tests/fuzz/fuzz_tar_reader.cpp). libarchive only decompresses (tar_decoder.cpp).
// Python's tarfile is the reference: the same members, names and bytes, or a refusal.

#include "tar_reader.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>

#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace {

constexpr uint64_t block_size = 512;
/// Pax and GNU long-name headers hold a few names; anything bigger is not a tar we can trust.
constexpr uint64_t max_meta_bytes = 1ull << 20;

struct Field {
  std::size_t at;
  std::size_t length;
};
constexpr Field f_name{0, 100}, f_mode{100, 8}, f_uid{108, 8}, f_gid{116, 8}, f_size{124, 12},
    f_mtime{136, 12}, f_checksum{148, 8}, f_magic{257, 6}, f_prefix{345, 155};
constexpr std::size_t f_type = 156;

std::string_view text_of(std::span<const std::byte> block, Field f) {
  std::string_view s(reinterpret_cast<const char*>(block.data()) + f.at, f.length);
  return s.substr(0, s.find('\0'));  // NUL-terminated unless it fills the field
}

/// Where errors come from: the shard and the member being read.
struct Where {
  const std::string& shard;
  uint64_t header_offset;
  std::string member;  // empty until the header's name is known

  [[noreturn]] void refuse(const std::string& reason) const {
    const auto what = member.empty()
                          ? fmt::format("the header at byte {}", header_offset)
                          : fmt::format("member '{}' (header at byte {})", member, header_offset);
    throw UsageError(fmt::format("{}: {}: {}", shard, what, reason), {.file = shard});
  }
};

/// A numeric header field: octal digits (space or NUL padded), or GNU base-256 when the first
/// byte has its top bit set (sizes of 8 GiB and more).
uint64_t number_of(std::span<const std::byte> block, Field f, const char* what,
                   const Where& where) {
  const auto* p = reinterpret_cast<const unsigned char*>(block.data()) + f.at;
  uint64_t value = 0;
  if (p[0] & 0x80) {
    if (p[0] == 0xff) where.refuse(fmt::format("negative {} (base-256)", what));
    value = p[0] & 0x7f;
    for (std::size_t i = 1; i < f.length; ++i) {
      if (value > (UINT64_MAX >> 8)) where.refuse(fmt::format("{} does not fit 64 bits", what));
      value = (value << 8) | p[i];
    }
    return value;
  }
  std::string_view s = text_of(block, f);
  const auto first = s.find_first_not_of(' ');
  if (first == std::string_view::npos) return 0;
  s = s.substr(first, s.find_last_not_of(' ') - first + 1);
  for (char c : s) {
    if (c < '0' || c > '7')
      where.refuse(fmt::format("{} field '{}' is not an octal number", what, s));
    if (value > (UINT64_MAX >> 3)) where.refuse(fmt::format("{} does not fit 64 bits", what));
    value = (value << 3) | static_cast<uint64_t>(c - '0');
  }
  return value;
}

/// The header checksum: the sum of its bytes with the checksum field read as spaces. Old tars
/// summed signed chars; tarfile and GNU tar accept either, and so do we.
void check_checksum(std::span<const std::byte> block, const Where& where) {
  const uint64_t stored = number_of(block, f_checksum, "checksum", where);
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (std::size_t i = 0; i < block_size; ++i) {
    const bool in_field = i >= f_checksum.at && i < f_checksum.at + f_checksum.length;
    const auto byte = in_field ? std::byte{' '} : block[i];
    unsigned_sum += std::to_integer<unsigned char>(byte);
    signed_sum += static_cast<signed char>(std::to_integer<unsigned char>(byte));
  }
  if (stored != unsigned_sum && static_cast<int64_t>(stored) != signed_sum) {
    where.refuse(
        fmt::format("header checksum {} does not match its bytes ({}): not a tar "
                    "archive, or a corrupt one",
                    stored, unsigned_sum));
  }
}

bool is_zero_block(std::span<const std::byte> block) {
  return std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; });
}

/// A pax value and the offset of its bytes in the archive.
struct PaxValue {
  std::string value;
  uint64_t offset = 0;
};
using PaxRecords = std::map<std::string, PaxValue, std::less<>>;

/// Parses pax records "LENGTH KEY=VALUE\n" (LENGTH counts the whole record, in decimal) from
/// `data`, which starts at `offset` in the archive.
void parse_pax(std::string_view data, uint64_t offset, PaxRecords& records, const Where& where) {
  std::size_t at = 0;
  while (at < data.size()) {
    if (data[at] == '\0') break;  // some writers pad the block with NULs
    std::size_t length = 0;
    std::size_t i = at;
    for (; i < data.size() && data[i] >= '0' && data[i] <= '9'; ++i) {
      if (length > (SIZE_MAX - 9) / 10) where.refuse("pax record length overflows");
      length = length * 10 + static_cast<std::size_t>(data[i] - '0');
    }
    if (i == at || i >= data.size() || data[i] != ' ' || length < i - at + 3 ||
        length > data.size() - at || data[at + length - 1] != '\n') {
      where.refuse(fmt::format("malformed pax record at byte {}", offset + at));
    }
    const std::string_view record = data.substr(i + 1, at + length - 1 - (i + 1));
    const auto eq = record.find('=');
    if (eq == std::string_view::npos || eq == 0)
      where.refuse(fmt::format("malformed pax record at byte {} (no KEY=)", offset + at));
    // An empty value is kept: it cancels a global record of the same key (POSIX).
    records[std::string(record.substr(0, eq))] = {std::string(record.substr(eq + 1)),
                                                  offset + (i + 1 + eq + 1)};
    at += length;
  }
}

/// The member's pax record for `key`: its own ('x'), else the global one ('g'); an empty value
/// cancels the key (POSIX). Looked up, not merged: a copy of the global records per member made
/// a crafted archive (one global header of 65,000 keys, 2,000 members) quadratic.
const PaxValue* pax_record(const PaxRecords& local, const PaxRecords& global,
                           std::string_view key) {
  auto it = local.find(key);
  if (it == local.end()) {
    it = global.find(key);
    if (it == global.end()) return nullptr;
  }
  return it->second.value.empty() ? nullptr : &it->second;
}

/// Whether the member has a GNU.sparse.* record, its own or a global one it does not cancel.
bool has_sparse_record(const PaxRecords& local, const PaxRecords& global) {
  constexpr std::string_view prefix = "GNU.sparse.";
  for (const PaxRecords* records : {&local, &global}) {
    for (auto it = records->lower_bound(prefix);
         it != records->end() && it->first.starts_with(prefix); ++it) {
      if (pax_record(local, global, it->first)) return true;
    }
  }
  return false;
}

uint64_t pax_size(const std::string& text, const Where& where) {
  uint64_t value = 0;
  if (text.empty()) where.refuse("pax size= is empty");
  for (char c : text) {
    if (c < '0' || c > '9' || value > (UINT64_MAX - 9) / 10)
      where.refuse(fmt::format("pax size='{}' is not a size", text));
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

bool is_regular(char type) {
  return type == '0' || type == '\0' || type == '7';
}

/// Members that have no data of their own: tarfile neither skips nor reads any for these.
bool has_no_data(char type) {
  return std::string_view("123456").find(type) != std::string_view::npos;
}

class TarLister {
 public:
  TarLister(uint64_t size, const TarReadAt& read_at, const std::string& shard)
      : m_size(size), m_read_at(read_at), m_shard(shard) {}

  std::vector<TarMember> run() {
    uint64_t at = 0;
    while (true) {
      Where where{m_shard, at, {}};
      if (at + block_size > m_size) {
        where.refuse(at == m_size ? "the archive ends without its end-of-archive block "
                                    "(truncated?)"
                                  : "the archive ends inside a header (truncated?)");
      }
      std::array<std::byte, block_size> block;
      m_read_at(block, at);
      if (is_zero_block(block)) {
        // The end (tarfile stops at the first zero block too).
        if (m_long_name || !m_local.empty())
          where.refuse("a pax or long-name header is followed by no member");
        break;
      }
      at = member(block, where);
    }
    return std::move(m_members);
  }

 private:
  /// Handles the header at where.header_offset; returns the offset of the next header.
  uint64_t member(std::span<const std::byte> block, Where& where) {
    check_checksum(block, where);
    // Unused, but tarfile refuses a header whose numbers do not parse, and so do we; base-256
    // values may be negative here (times before 1970), so only octal ones are read.
    for (const auto& [field, what] : {std::pair{f_mode, "mode"}, std::pair{f_uid, "uid"},
                                      std::pair{f_gid, "gid"}, std::pair{f_mtime, "mtime"}}) {
      if (!(std::to_integer<unsigned char>(block[field.at]) & 0x80))
        number_of(block, field, what, where);
    }
    const char type = static_cast<char>(block[f_type]);
    const uint64_t data_offset = where.header_offset + block_size;
    std::string name(text_of(block, f_name));
    std::optional<uint64_t> name_offset = where.header_offset;
    // The ustar prefix, as tarfile reads it, except in GNU headers (magic "ustar "), whose
    // bytes there hold access and change times.
    if (const auto prefix = text_of(block, f_prefix);
        !prefix.empty() && !is_meta(type) && text_of(block, f_magic) != "ustar ") {
      name = std::string(prefix) + "/" + name;
      name_offset.reset();
    }
    uint64_t size = 0;
    if (is_meta(type)) {
      size = number_of(block, f_size, "size", where);
    } else {
      if (m_long_name) {
        name = std::move(m_long_name->value);
        name_offset = m_long_name->offset;
        m_long_name.reset();
      }
      const PaxRecords local = std::exchange(m_local, {});
      if (const PaxValue* path = pax_record(local, m_global, "path")) {
        name = path->value;
        name_offset = path->offset;
      }
      where.member = name;
      const PaxValue* pax_bytes = pax_record(local, m_global, "size");
      size =
          pax_bytes ? pax_size(pax_bytes->value, where) : number_of(block, f_size, "size", where);
      if (has_sparse_record(local, m_global)) where.refuse("sparse members are not supported");
    }
    // A v7 directory, by its header's own name as tarfile decides it.
    if (type == '\0' && text_of(block, f_name).ends_with('/')) return data_offset;
    if (has_no_data(type)) return data_offset;
    if (size > m_size - data_offset) {
      where.refuse(
          fmt::format("its {} bytes of data run past the end of the archive ({} bytes; "
                      "truncated?)",
                      size, m_size));
    }
    const uint64_t next = data_offset + (size + block_size - 1) / block_size * block_size;
    if (type == 'x' || type == 'g') {
      parse_pax(meta_data(data_offset, size, where), data_offset, type == 'g' ? m_global : m_local,
                where);
    } else if (type == 'L') {
      auto data = meta_data(data_offset, size, where);
      m_long_name = PaxValue{std::string(data.substr(0, data.find('\0'))), data_offset};
    } else if (type == 'S') {
      where.refuse("GNU sparse members are not supported");
    } else if (is_regular(type)) {
      m_members.push_back(TarMember{.name = std::move(name),
                                    .data_offset = data_offset,
                                    .size = size,
                                    .name_offset = name_offset});
    } else if (type != 'K') {
      // What tarfile does with a type it does not know: skip its data.
      spdlog::warn("{}: skipping member '{}' of unknown type '{}'", m_shard, name, type);
    }
    return next;
  }

  static bool is_meta(char type) {
    return type == 'x' || type == 'g' || type == 'L' || type == 'K';
  }

  std::string_view meta_data(uint64_t offset, uint64_t size, const Where& where) {
    if (size > max_meta_bytes)
      where.refuse(fmt::format("a pax or long-name header of {} bytes (over 1 MiB)", size));
    m_meta.resize(size);
    m_read_at(std::as_writable_bytes(std::span(m_meta)), offset);
    return m_meta;
  }

  uint64_t m_size;
  const TarReadAt& m_read_at;
  const std::string& m_shard;
  std::vector<TarMember> m_members;
  PaxRecords m_global;                  // 'g' records: apply to every later member
  PaxRecords m_local;                   // 'x' records: apply to the next member only
  std::optional<PaxValue> m_long_name;  // a GNU 'L' name for the next member
  std::string m_meta;
};

}  // namespace

std::vector<TarMember> list_tar_members(uint64_t size, const TarReadAt& read_at,
                                        const std::string& shard) {
  return TarLister(size, read_at, shard).run();
}

std::vector<TarMember> list_tar_members(const FileDescriptor& fd, const std::string& shard) {
  return list_tar_members(
      fd.size(),
      [&fd](std::span<std::byte> dest, uint64_t offset) { fd.pread_exact(dest, offset); }, shard);
}

bool has_ustar_magic(std::span<const std::byte> block) {
  if (block.size() < f_magic.at + 6) return false;
  const std::string_view magic(reinterpret_cast<const char*>(block.data()) + f_magic.at, 6);
  return magic == std::string_view("ustar\0", 6) || magic == "ustar ";
}

}  // namespace ddstage::formats
