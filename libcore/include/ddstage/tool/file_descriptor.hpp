// Owning wrapper for a POSIX file descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace ddstage {

class Error;

/// Move-only owner of an fd; closes it on destruction. I/O helpers throw IoError naming the path.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  FileDescriptor(int fd, std::filesystem::path path) noexcept : m_fd(fd), m_path(std::move(path)) {}
  FileDescriptor(FileDescriptor&& other) noexcept;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  /// Opens path with open(2) flags; throws IoError (usage kind when the file does not exist).
  static FileDescriptor open(const std::filesystem::path& path, int flags, int mode = 0644);

  int get() const noexcept { return m_fd; }
  explicit operator bool() const noexcept { return m_fd >= 0; }
  const std::filesystem::path& path() const noexcept { return m_path; }

  /// Reads exactly dest.size() bytes at offset (retries short reads); throws on EOF or error.
  void pread_exact(std::span<std::byte> dest, uint64_t offset) const;
  /// Writes all of src at the current position; throws IoError (ENOSPC, EFBIG, ...).
  void write_all(std::span<const std::byte> src) const;
  /// Writes all of src at offset.
  void pwrite_all(std::span<const std::byte> src, uint64_t offset) const;
  uint64_t size() const;
  void sync() const;
  /// Closes now; IoError when close(2) reports a write it had deferred (NFS, quotas), so that
  /// a finished file is known to be whole before it is renamed into place.
  void close();

 private:
  void reset() noexcept;
  int m_fd = -1;
  std::filesystem::path m_path;
};

/// The error of a read that found path ending at byte `at`, before the bytes the index says
/// are there.
Error unexpected_end(const std::filesystem::path& path, uint64_t at);

/// The process's soft limit on open files (RLIMIT_NOFILE), for sizing fd caches.
std::size_t open_file_limit() noexcept;

/// Raises the soft limit on open files to the hard one (what `ulimit -n` allows without
/// privileges) and returns the soft limit in force after: a serve rank talks to many peers, and
/// the common soft limit of 1,024 is far below what a node allows.
std::size_t raise_open_file_limit() noexcept;

/// errno values that mean this process (or host) ran out of something (descriptors, memory,
/// buffers), not that the peer it was reaching is gone.
bool local_resource_error(int err) noexcept;

}  // namespace ddstage
