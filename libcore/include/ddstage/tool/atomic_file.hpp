// A file that readers see whole or not at all.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

/// Writes a file under a temporary name in the target's directory (so the rename stays on one
/// file system) and renames it over the target in commit(), after an fsync: readers see the
/// old content or the new, never a truncated file. Destroyed without commit() (an exception on
/// the way), it removes the temporary file and leaves the target untouched.
///
/// Atomic for readers, not durable: the directory is not fsynced after the rename, so after a
/// crash of the machine the old file may come back. Deliberate: store.yaml is rewritten on
/// every load, and an fsync of /dev/shm or the store directory each time buys nothing a
/// restarted store needs.
class AtomicFile {
 public:
  /// Creates the temporary file `TARGET.partial-XXXXXXXX` (O_EXCL under a random name: a
  /// leftover of a crashed writer, or a link planted there, is never opened). mode: the exact
  /// permission bits, whatever the umask; without it, those of the file being replaced, or of
  /// a new file (0666 less the umask). IoError when the directory is not writable.
  explicit AtomicFile(std::filesystem::path target, std::optional<mode_t> mode = std::nullopt);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// The open temporary file, named by the target in its errors (the name the user knows).
  const FileDescriptor& fd() const noexcept { return m_fd; }
  void write(std::span<const std::byte> bytes) const { m_fd.write_all(bytes); }
  void write(std::string_view text) const {
    write(std::as_bytes(std::span(text.data(), text.size())));
  }
  /// fsyncs and renames the file over the target; returns its descriptor, still open (a lock
  /// taken on it is kept). IoError on failure, and the temporary file is removed. Once only:
  /// a second call is a std::logic_error (a bug in the caller, not in its input).
  FileDescriptor commit();

  const std::filesystem::path& target() const noexcept { return m_target; }
  /// Empty once committed.
  const std::filesystem::path& temp_path() const noexcept { return m_temp; }

 private:
  std::filesystem::path m_target;
  std::filesystem::path m_temp;
  FileDescriptor m_fd;
};

}  // namespace ddstage
