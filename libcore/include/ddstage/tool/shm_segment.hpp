// Owning wrapper for a POSIX shared-memory segment and its mapping.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

/// A named POSIX shared-memory segment (shm_open + mmap). The creator owns the name and
/// unlinks it on destruction; openers only unmap. Move-only.
class ShmSegment {
 public:
  ShmSegment() = default;
  /// Creates "/NAME" (mode 0600, must not exist), sizes it and maps it read-write. The memory
  /// is reserved up front (posix_fallocate), so a full /dev/shm fails here, not on first touch.
  static ShmSegment create(const std::string& name, std::size_t bytes);
  /// Maps an existing segment read-only; UsageError naming it if it is gone.
  static ShmSegment open_read_only(const std::string& name);
  /// The same, but nullopt when no segment has that name (never created, or already unlinked:
  /// its dataset was replaced or unloaded, or its store stopped). Other failures throw IoError.
  static std::optional<ShmSegment> try_open_read_only(const std::string& name);

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
