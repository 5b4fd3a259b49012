// Owning wrapper for an mmap'd region of a file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace ddstage {

/// Move-only mmap of a whole file, read-only or shared writable, or a read-only copy of it in
/// anonymous memory; munmaps on destruction.
class MappedFile {
 public:
  /// copied: the file's bytes read once into memory of this process's own. A file truncated
  /// under a mapping makes the next access to the lost pages SIGBUS; a copy cannot be taken
  /// away (issue 28).
  enum class Mode { read_only, read_write, copied };

  MappedFile() = default;
  /// Maps the whole of path (an empty file maps to an empty span).
  MappedFile(const std::filesystem::path& path, Mode mode);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const noexcept { return {m_data, m_size}; }
  std::span<std::byte> writable() noexcept { return {m_data, m_size}; }
  /// msync the mapping so a later rename publishes complete data.
  void flush();
  /// Tells the kernel the mapping will be read front to back (aggressive readahead, early
  /// reclaim). Advisory: failures are ignored.
  void advise_sequential() noexcept;

 private:
  void reset() noexcept;
  std::byte* m_data = nullptr;
  std::size_t m_size = 0;
  std::filesystem::path m_path;
};

}  // namespace ddstage
