// The decompressed bytes of a deflated zip member, streamed in bounded pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddstage/tool/file_descriptor.hpp"
#include "zip_directory.hpp"

namespace ddstage::formats {

/// Checks the CRC-32 of a stored (method 0) member, reading `chunk_bytes` (4 KiB to 1 MiB) at
/// a time: numpy.load refuses a member that fails it. A mismatch throws Error(runtime) naming
/// `name`.
void check_stored_crc(const FileDescriptor& fd, const ZipMember& member, const std::string& name,
                      uint64_t chunk_bytes);

/// Inflates one deflated (method 8) member of an archive, reading `chunk_bytes` (4 KiB to
/// 1 MiB) of compressed data at a time. Corrupt data, a short member or a CRC-32 that does not
/// match throw Error(runtime) naming `name`.
class ZipInflater {
 public:
  ZipInflater(const FileDescriptor& fd, const ZipMember& member, std::string name,
              uint64_t chunk_bytes);
  ZipInflater(const ZipInflater&) = delete;
  ZipInflater& operator=(const ZipInflater&) = delete;
  ~ZipInflater();

  /// Fills `out` with the next decompressed bytes; throws if the member ends first.
  void read(std::span<std::byte> out);
  /// Checks that every byte was read, the stream ended there and the CRC-32 matches.
  void finish();

 private:
  /// Hands zlib the next piece of compressed bytes.
  void refill();
  [[noreturn]] void corrupt(const std::string& reason) const;

  struct Stream;
  const FileDescriptor& m_fd;
  ZipMember m_member;
  std::string m_name;
  std::vector<std::byte> m_input;
  uint64_t m_consumed = 0;  // compressed bytes handed to zlib
  uint64_t m_produced = 0;  // decompressed bytes returned
  uint32_t m_crc = 0;
  bool m_ended = false;
  std::unique_ptr<Stream> m_stream;
};

}  // namespace ddstage::formats
