// The central directory of a zip archive (a .npz is one): where each member's bytes lie.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ddstage::formats {

/// The first four bytes of a zip archive that starts with a member (local file header).
inline constexpr std::string_view zip_magic = "PK\x03\x04";
/// The first four bytes of a zip archive without members (its end record).
inline constexpr std::string_view zip_empty_magic = "PK\x05\x06";

/// General purpose flag bits (ZipMember::flags) a reader must understand to read the data.
inline constexpr uint16_t zip_encrypted = 1 << 0;
inline constexpr uint16_t zip_patched = 1 << 5;
inline constexpr uint16_t zip_strong_encryption = 1 << 6;

/// One member of a zip archive, as its central directory and local header describe it.
struct ZipMember {
  std::string name;
  uint16_t flags = 0;   ///< general purpose bits (zip_encrypted, ...)
  uint16_t method = 0;  ///< 0 stored, 8 deflated
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;  ///< bytes at data_offset
  uint64_t size = 0;             ///< bytes once decompressed
  uint64_t header_offset = 0;    ///< of the local file header, in this file
  uint64_t data_offset = 0;      ///< of the member's (compressed) bytes
};

/// Reads `out.size()` bytes at `offset` of the archive, or throws.
using ReadAt = std::function<void(std::span<std::byte> out, uint64_t offset)>;

/// Every member of a zip archive of `file_size` bytes, in central directory order: the end
/// record (zip64 when the archive has one), the central directory, and each member's local
/// header, checked against the directory (name and method agree; every member lies before the
/// directory). Offsets are found as Python's zipfile finds them: shifted by as many bytes as
/// precede the archive (a zip appended to another file reads as the appended one). Throws
/// UsageError "NAME is not a valid zip archive: reason". Reads a bounded tail, then the directory
/// and 30 bytes plus the name of each local header: never the data.
std::vector<ZipMember> read_zip_directory(uint64_t file_size, const ReadAt& read_at,
                                          const std::string& name);

}  // namespace ddstage::formats
