// The members of a tar archive (ustar, pax, GNU and v7 headers) with the exact byte offset of
// each one's data, so that flatten can index them where they lie.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::formats {

/// One regular file inside a tar archive.
struct TarMember {
  std::string name;  ///< the full path: pax path=, else GNU long name, else ustar prefix/name
  uint64_t data_offset = 0;  ///< of its first data byte in the archive
  uint64_t size = 0;
  /// Where `name`'s bytes lie contiguously in the archive (a header's name field, a GNU long
  /// name's data, a pax path= value); nullopt when they do not (ustar prefix + "/" + name).
  std::optional<uint64_t> name_offset;
};

/// Fills dest with the archive's bytes at offset; the parser only asks for bytes inside the
/// archive's size.
using TarReadAt = std::function<void(std::span<std::byte> dest, uint64_t offset)>;

/// Lists the regular-file members of an archive of `size` bytes, in archive order, reading
/// only headers (and pax / GNU long-name data). Directories, links, devices and fifos are
/// skipped, as Python's tarfile and WebDataset skip them. Throws UsageError naming `shard`,
/// the member and the reason for anything it cannot vouch for: a bad header checksum, a
/// malformed number or pax record, a member whose data runs past the end, an archive without
/// its end-of-archive block (truncated), sparse or negative-size members.
std::vector<TarMember> list_tar_members(uint64_t size, const TarReadAt& read_at,
                                        const std::string& shard);

/// The same over an open file (its whole size).
std::vector<TarMember> list_tar_members(const FileDescriptor& fd, const std::string& shard);

/// True if a 512-byte block starting at `block` has the ustar magic at offset 257 (POSIX
/// "ustar\0" or GNU "ustar ").
bool has_ustar_magic(std::span<const std::byte> block);

}  // namespace ddstage::formats
