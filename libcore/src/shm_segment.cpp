#include "ddstage/tool/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {
namespace {

std::byte* map(int fd, std::size_t bytes, int prot, const std::string& name) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw IoError("mmap shared memory " + name, errno);
  return static_cast<std::byte*>(p);
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
  int raw = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (raw < 0) throw IoError("cannot create shared memory " + name, errno);
  FileDescriptor fd(raw, "/dev/shm" + name);
  ShmSegment seg;
  seg.m_name = name;
  seg.m_owner = true;  // from here on the destructor unlinks it, also if sizing fails
  if (bytes > 0) {
    if (int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); rc != 0) {
      throw IoError(
          "cannot allocate " + std::to_string(bytes) + " bytes of shared memory for " + name, rc);
    }
  }
  seg.m_data = map(fd.get(), bytes, PROT_READ | PROT_WRITE, name);
  seg.m_size = bytes;
  seg.m_fd = std::move(fd);
  return seg;
}

ShmSegment ShmSegment::open_read_only(const std::string& name) {
  auto seg = try_open_read_only(name);
  if (!seg) throw IoError("cannot open shared memory " + name, ENOENT);
  return std::move(*seg);
}

std::optional<ShmSegment> ShmSegment::try_open_read_only(const std::string& name) {
  int raw = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (raw < 0 && errno == ENOENT) return std::nullopt;
  if (raw < 0) throw IoError("cannot open shared memory " + name, errno);
  ShmSegment seg;
  seg.m_fd = FileDescriptor(raw, "/dev/shm" + name);
  seg.m_name = name;
  // /dev/shm is writable by everyone and segment names are visible: another user can create a
  // name a store is about to use (between the unlink and the republish of a replace, say). The
  // store creates its segments 0600 with O_EXCL, so anything else is not this user's store.
  struct stat st {};
  if (::fstat(raw, &st) != 0) throw IoError("fstat shared memory " + name, errno);
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    throw UsageError(
        fmt::format("shared memory /dev/shm{} is owned by uid {} with mode {:04o}, not by you "
                    "(uid {}) with mode 0600: refusing to read it",
                    name, st.st_uid, st.st_mode & 07777, ::geteuid()));
  }
  seg.m_size = static_cast<std::size_t>(st.st_size);
  seg.m_data = map(seg.m_fd.get(), seg.m_size, PROT_READ, name);
  return seg;
}

bool ShmSegment::unlinked() const {
  struct stat st {};
  if (::fstat(m_fd.get(), &st) != 0) throw IoError("fstat shared memory " + m_name, errno);
  return st.st_nlink == 0;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : m_name(std::move(other.m_name)),
      m_fd(std::move(other.m_fd)),
      m_data(std::exchange(other.m_data, nullptr)),
      m_size(std::exchange(other.m_size, 0)),
      m_owner(std::exchange(other.m_owner, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    reset();
    m_name = std::move(other.m_name);
    m_fd = std::move(other.m_fd);
    m_data = std::exchange(other.m_data, nullptr);
    m_size = std::exchange(other.m_size, 0);
    m_owner = std::exchange(other.m_owner, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  reset();
}

void ShmSegment::unlink() noexcept {
  if (m_owner && ::shm_unlink(m_name.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("shm_unlink({}) failed: errno {}", m_name, errno);
  }
  m_owner = false;
}

void ShmSegment::reset() noexcept {
  if (m_data && ::munmap(m_data, m_size) != 0)
    spdlog::warn("munmap({}) failed: errno {}", m_name, errno);
  m_data = nullptr;
  m_size = 0;
  m_fd = FileDescriptor();
  unlink();
}

}  // namespace ddstage
