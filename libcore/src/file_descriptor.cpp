#include "ddstage/tool/file_descriptor.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"

namespace ddstage {

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)), m_path(std::move(other.m_path)) {}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    m_fd = std::exchange(other.m_fd, -1);
    m_path = std::move(other.m_path);
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  reset();
}

void FileDescriptor::reset() noexcept {
  if (m_fd >= 0 && ::close(m_fd) != 0) {
    spdlog::warn("close({}) failed: errno {}", m_path.string(), errno);
  }
  m_fd = -1;
}

void FileDescriptor::close() {
  // Linux releases the descriptor even when close fails, so it is forgotten either way.
  const int fd = std::exchange(m_fd, -1);
  if (fd >= 0 && ::close(fd) != 0)
    throw IoError("close " + m_path.string(), errno, {.file = m_path.string()});
}

Error unexpected_end(const std::filesystem::path& path, uint64_t at) {
  return Error(ErrorKind::runtime,
               "unexpected end of " + path.string() + " at byte " + std::to_string(at) +
                   " (file shorter than the index says)",
               {.file = path.string()});
}

FileDescriptor FileDescriptor::open(const std::filesystem::path& path, int flags, int mode) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) throw IoError("cannot open " + path.string(), errno, {.file = path.string()});
  return FileDescriptor(fd, path);
}

void FileDescriptor::pread_exact(std::span<std::byte> dest, uint64_t offset) const {
  std::size_t done = 0;
  while (done < dest.size()) {
    ssize_t n =
        ::pread(m_fd, dest.data() + done, dest.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("pread " + m_path.string(), errno, {.file = m_path.string()});
    }
    if (n == 0) throw unexpected_end(m_path, offset + done);
    done += static_cast<std::size_t>(n);
  }
}

void FileDescriptor::write_all(std::span<const std::byte> src) const {
  std::size_t done = 0;
  while (done < src.size()) {
    ssize_t n = ::write(m_fd, src.data() + done, src.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("write " + m_path.string(), errno, {.file = m_path.string()});
    }
    done += static_cast<std::size_t>(n);
  }
}

void FileDescriptor::pwrite_all(std::span<const std::byte> src, uint64_t offset) const {
  std::size_t done = 0;
  while (done < src.size()) {
    ssize_t n =
        ::pwrite(m_fd, src.data() + done, src.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("write " + m_path.string(), errno, {.file = m_path.string()});
    }
    done += static_cast<std::size_t>(n);
  }
}

uint64_t FileDescriptor::size() const {
  struct stat st {};
  if (::fstat(m_fd, &st) != 0)
    throw IoError("fstat " + m_path.string(), errno, {.file = m_path.string()});
  return static_cast<uint64_t>(st.st_size);
}

void FileDescriptor::sync() const {
  if (::fsync(m_fd) != 0)
    throw IoError("fsync " + m_path.string(), errno, {.file = m_path.string()});
}

std::size_t open_file_limit() noexcept {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return static_cast<std::size_t>(limit.rlim_cur);
}

std::size_t raise_open_file_limit() noexcept {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    const auto before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
      spdlog::warn("could not raise the open-file limit from {} to {}: errno {}", before,
                   limit.rlim_max, errno);
  }
  return open_file_limit();
}

bool local_resource_error(int err) noexcept {
  return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS;
}

}  // namespace ddstage
