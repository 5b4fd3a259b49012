// Owning wrapper for a POSIX shared-memory segment, or a file on a node-local tier, and its
// mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

/// A named POSIX shared-memory segment (shm_open + mmap), or a file on a node-local tier:
/// a name that is an absolute path with a directory ("/local/nvme/ddstage-ID-NAME-gN-rR", see
/// is_file()) is that file, mapped MAP_SHARED exactly as a segment is (a segment is a file in
/// /dev/shm), so readers on the node map either alike and the page cache keeps a tier file's
/// hottest pages in memory. A tier file's directory must be the user's own and writable by no
/// one else, as the store directory is. The creator owns the name and unlinks it on
/// destruction; openers only unmap. Move-only.
class ShmSegment {
 public:
  ShmSegment() = default;
  /// Creates "/NAME" (mode 0600, must not exist), sizes it and maps it read-write. The memory
  /// is reserved up front (posix_fallocate), so a full /dev/shm fails here, not on first touch.
  /// For a file name: the same in its directory (O_EXCL | O_NOFOLLOW: never a file or link
  /// someone else made), the disk blocks reserved; UsageError for an untrusted directory.
  static ShmSegment create(const std::string& name, std::size_t bytes);
  /// Maps an existing segment read-only; UsageError naming it if it is gone.
  static ShmSegment open_read_only(const std::string& name);
  /// The same, but nullopt when no segment has that name (never created, or already unlinked:
  /// its dataset was replaced or unloaded, or its store stopped). Other failures throw IoError;
  /// a segment not this user's own (owner, mode 0600), or a tier file that is a symbolic link,
  /// not a regular file or in an untrusted directory, UsageError.
  static std::optional<ShmSegment> try_open_read_only(const std::string& name);

  /// True when `name` is a file on a tier (an absolute path with a '/' after the first
  /// character), false for a POSIX shared-memory name.
  static bool is_file(std::string_view name) noexcept;
  /// Removes the name of a segment or tier file, whoever holds it (a rank's way out frees what
  /// its ShmSegments cannot); true when this call removed it.
  static bool remove(const std::string& name) noexcept;

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  const std::string& name() const noexcept { return m_name; }
  std::span<const std::byte> bytes() const noexcept { return {m_data, m_size}; }
  std::span<std::byte> writable() noexcept { return {m_data, m_size}; }
  /// The segment's file (opened read-write by create, read-only by the openers): writing
  /// through it fills pages without faulting them into the mapping.
  const FileDescriptor& file() const noexcept { return m_fd; }
  /// For a tier file written through its mapping: bytes [offset, offset + bytes) (whole pages
  /// around them) leave this process's mapping and their writeback starts, so that filling a
  /// file larger than memory keeps only what is being written mapped. Nothing for shared
  /// memory. Hints only: the bytes stay as written.
  void release_pages(uint64_t offset, uint64_t bytes) const noexcept;
  /// Removes the name now (readers that mapped it keep their mapping).
  void unlink() noexcept;
  /// For a segment opened read-only: true once its name has been unlinked (the mapping stays
  /// readable, but nothing serves it any more). One fstat(2).
  bool unlinked() const;

 private:
  void reset() noexcept;
  std::string m_name;
  FileDescriptor m_fd;  ///< for unlinked() (openers) and writes through the file (creator)
  std::byte* m_data = nullptr;
  std::size_t m_size = 0;
  bool m_owner = false;
};

}  // namespace ddstage
