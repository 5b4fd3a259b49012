// Where a command writes what it produces: `read -o`, `--json`, `--csv`, `--plot`.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ddstage/tool/atomic_file.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::cli {

/// One output path, written the way its kind needs:
/// - a regular file, a new name, or a symlink (chain) ending at one: written as an AtomicFile
///   beside the final target, renamed over it on commit(), so a failed run never leaves a
///   truncated file that looks complete, and a symlink stays a symlink;
/// - anything else (a character or block device, a FIFO, a socket): written through in place.
///   Renaming over it would replace, say, /dev/null with a regular file for every user of the
///   node;
/// - "-" or empty, /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the process's own
///   descriptor, duplicated rather than reopened, so `>>` keeps appending and a pipe stays a pipe.
/// A directory is a UsageError. Without commit(), the temporary file is removed.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }
  /// Closes the output and, for a regular file, renames it into place; IoError on failure.
  void commit();
  /// The path as given (for messages).
  const std::string& path() const noexcept { return m_path; }

 private:
  std::string m_path;
  std::optional<AtomicFile> m_file;  // a regular file; empty when written in place
  FileDescriptor m_fd;
};

/// True when OutputFile(path) would write to this process's stdout ("-", empty, /dev/stdout,
/// /dev/fd/1, ...).
bool names_stdout(const std::string& path);

/// Writes text to path as OutputFile does; IoError on failure.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace ddstage::cli
