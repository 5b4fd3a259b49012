#include "ddstage/tool/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;

/// What messages call a segment: the file it is, in /dev/shm or on a tier.
std::string describe(const std::string& name) {
  return ShmSegment::is_file(name) ? "tier file " + name : "shared memory /dev/shm" + name;
}

std::byte* map(int fd, std::size_t bytes, int prot, const std::string& name) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw IoError("mmap " + describe(name), errno);
  // Rows are read at random, by readers mapping it and by libfabric from the rank's own
  // mapping: a fault on a tier file's page not in memory would otherwise read a whole readahead
  // window around it (read_ahead_kb: 8 MiB on this VM, 15 ms for a 3 KB row; 0.2 ms with this
  // hint, `ddstage bench tier`). A hint: its failure changes no byte.
  if (ShmSegment::is_file(name)) ::madvise(p, bytes, MADV_RANDOM);
  return static_cast<std::byte*>(p);
}

struct stat stat_of(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw IoError("fstat " + describe(name), errno);
  return st;
}

/// A tier file's directory, opened (nullopt when it does not exist) and checked as the store
/// directory is: whoever else could write it could put a file of theirs under a name readers
/// map, or swap one between a rank's load and a reader's open. The files are then opened
/// relative to this very directory.
std::optional<FileDescriptor> open_tier_directory(const fs::path& dir) {
  const int raw = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0 && errno == ENOENT) return std::nullopt;
  if (raw < 0) throw IoError("open tier directory " + dir.string(), errno);
  FileDescriptor fd(raw, dir);
  const auto st = stat_of(raw, dir.string());
  if (st.st_uid != ::geteuid()) {
    throw UsageError(fmt::format(
        "tier directory {} is owned by uid {}, not you (uid {}): a tier is trusted only in a "
        "directory of your own",
        dir.string(), st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw UsageError(fmt::format(
        "tier directory {} is writable by others (mode {:04o}): a tier is trusted only in a "
        "directory only you can write; run `chmod go-w {}`",
        dir.string(), st.st_mode & 07777, dir.string()));
  }
  return fd;
}

/// open(2) of a tier file inside its checked directory; -1 with errno ENOENT when the directory
/// is gone. A symbolic link is refused (O_NOFOLLOW): it would lead out of the trusted directory.
int open_tier_file(const std::string& name, int flags, mode_t mode) {
  const fs::path path(name);
  const auto dir = open_tier_directory(path.parent_path());
  if (!dir) {
    errno = ENOENT;
    return -1;
  }
  const int raw = ::openat(dir->get(), path.filename().c_str(), flags | O_NOFOLLOW, mode);
  if (raw < 0 && errno == ELOOP) {
    throw UsageError("tier file " + name +
                     " is a symbolic link: refused (a tier holds files of its own only)");
  }
  return raw;
}

}  // namespace

bool ShmSegment::is_file(std::string_view name) noexcept {
  return name.size() > 1 && name.front() == '/' && name.find('/', 1) != std::string_view::npos;
}

bool ShmSegment::remove(const std::string& name) noexcept {
  return (is_file(name) ? ::unlink(name.c_str()) : ::shm_unlink(name.c_str())) == 0;
}

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  const int raw =
      is_file(name) ? open_tier_file(name, flags, 0600) : ::shm_open(name.c_str(), flags, 0600);
  if (raw < 0) throw IoError("cannot create " + describe(name), errno);
  FileDescriptor fd(raw, is_file(name) ? name : "/dev/shm" + name);
  ShmSegment seg;
  seg.m_name = name;
  seg.m_owner = true;  // from here on the destructor unlinks it, also if sizing fails
  if (bytes > 0) {
    if (int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); rc != 0) {
      throw IoError("cannot allocate " + std::to_string(bytes) + " bytes for " + describe(name),
                    rc);
    }
  }
  seg.m_data = map(fd.get(), bytes, PROT_READ | PROT_WRITE, name);
  seg.m_size = bytes;
  seg.m_fd = std::move(fd);
  return seg;
}

ShmSegment ShmSegment::open_read_only(const std::string& name) {
  auto seg = try_open_read_only(name);
  if (!seg) throw IoError("cannot open " + describe(name), ENOENT);
  return std::move(*seg);
}

std::optional<ShmSegment> ShmSegment::try_open_read_only(const std::string& name) {
  // O_NONBLOCK: a FIFO planted under a tier file's name must not block the reader.
  const int raw = is_file(name) ? open_tier_file(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0)
                                : ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (raw < 0 && errno == ENOENT) return std::nullopt;
  if (raw < 0) throw IoError("cannot open " + describe(name), errno);
  ShmSegment seg;
  seg.m_fd = FileDescriptor(raw, is_file(name) ? name : "/dev/shm" + name);
  seg.m_name = name;
  // /dev/shm is writable by everyone and segment names are visible: another user can create a
  // name a store is about to use (between the unlink and the republish of a replace, say). The
  // store creates its segments 0600 with O_EXCL, so anything else is not this user's store.
  const auto st = stat_of(raw, name);
  if (!S_ISREG(st.st_mode)) throw UsageError(describe(name) + " is not a regular file: refused");
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    throw UsageError(
        fmt::format("{} is owned by uid {} with mode {:04o}, not by you (uid {}) with mode 0600: "
                    "refusing to read it",
                    describe(name), st.st_uid, st.st_mode & 07777, ::geteuid()));
  }
  seg.m_size = static_cast<std::size_t>(st.st_size);
  seg.m_data = map(seg.m_fd.get(), seg.m_size, PROT_READ, name);
  return seg;
}

void ShmSegment::release_pages(uint64_t offset, uint64_t bytes) const noexcept {
  static const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!is_file(m_name) || bytes == 0 || offset >= m_size) return;
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min<uint64_t>((offset + bytes + page - 1) / page * page, m_size);
  // MADV_DONTNEED on a shared file mapping only unmaps: dirty pages stay in the page cache and
  // reach the file. SYNC_FILE_RANGE_WRITE starts writing them without waiting, so dirty pages
  // do not pile up to the kernel's dirty limit before the disk sees any.
  ::madvise(m_data + begin, end - begin, MADV_DONTNEED);
  ::sync_file_range(m_fd.get(), static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                    SYNC_FILE_RANGE_WRITE);
}

bool ShmSegment::unlinked() const {
  return stat_of(m_fd.get(), m_name).st_nlink == 0;
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
  if (m_owner && !remove(m_name) && errno != ENOENT) {
    spdlog::warn("cannot remove {}: errno {}", describe(m_name), errno);
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
