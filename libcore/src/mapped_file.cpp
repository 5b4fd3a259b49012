#include "ddstage/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <utility>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

MappedFile::MappedFile(const std::filesystem::path& path, Mode mode) : m_path(path) {
  bool rw = mode == Mode::read_write;
  auto fd = FileDescriptor::open(path, rw ? O_RDWR : O_RDONLY);
  m_size = fd.size();
  if (m_size == 0) return;
  const bool copied = mode == Mode::copied;
  void* p =
      copied ? ::mmap(nullptr, m_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
             : ::mmap(nullptr, m_size, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                      fd.get(), 0);
  if (p == MAP_FAILED) {
    m_size = 0;
    throw IoError("mmap " + path.string(), errno, {.file = path.string()});
  }
  m_data = static_cast<std::byte*>(p);
  if (!copied) return;
  // A file cut short meanwhile ends the read with an error (the destructor unmaps); one that
  // changed is what the caller's checksums are for.
  fd.pread_exact({m_data, m_size}, 0);
  ::mprotect(m_data, m_size, PROT_READ);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)),
      m_size(std::exchange(other.m_size, 0)),
      m_path(std::move(other.m_path)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    m_data = std::exchange(other.m_data, nullptr);
    m_size = std::exchange(other.m_size, 0);
    m_path = std::move(other.m_path);
  }
  return *this;
}

MappedFile::~MappedFile() {
  reset();
}

void MappedFile::flush() {
  if (m_data && ::msync(m_data, m_size, MS_SYNC) != 0) {
    throw IoError("msync " + m_path.string(), errno, {.file = m_path.string()});
  }
}

void MappedFile::advise_sequential() noexcept {
  if (m_data) ::madvise(m_data, m_size, MADV_SEQUENTIAL);
}

void MappedFile::reset() noexcept {
  if (m_data && ::munmap(m_data, m_size) != 0) {
    spdlog::warn("munmap({}) failed: errno {}", m_path.string(), errno);
  }
  m_data = nullptr;
  m_size = 0;
}

}  // namespace ddstage
