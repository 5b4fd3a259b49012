#include "rank_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string_view>

#include "ddstage/error.hpp"
#include "ddstage/tool/atomic_file.hpp"
#include "process.hpp"

namespace ddstage::detail {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view prefix = "ddstage-";
constexpr std::string_view lock_suffix = ".lock";

/// The rank in a name ending "-rR" (after lock_suffix is cut), or -1.
int trailing_rank(std::string_view name) {
  const auto dash = name.rfind("-r");
  if (dash == std::string_view::npos || dash + 2 == name.size()) return -1;
  int rank = -1;
  const auto digits = name.substr(dash + 2);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  return ec == std::errc() && end == digits.data() + digits.size() ? rank : -1;
}

/// Store ids are 12 lowercase hex digits (StoreDescriptor::id).
bool is_store_id(std::string_view id) {
  return id.size() == 12 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

fs::path shm_directory() {
  return "/dev/shm";
}

std::string RankLock::file_name(const std::string& store_id, int rank) {
  return std::string(prefix) + store_id + "-r" + std::to_string(rank) + std::string(lock_suffix);
}

RankLock::RankLock(const std::string& store_id, int rank) {
  AtomicFile file(shm_directory() / file_name(store_id, rank), 0600);
  if (::flock(file.fd().get(), LOCK_EX | LOCK_NB) != 0)
    throw IoError("flock " + file.temp_path().string(), errno);
  file.write(std::to_string(::getpid()) + "\n");
  // Renamed once locked and written: no one sees the final name unlocked or empty. The
  // descriptor, named by the final path, is what release() removes.
  m_fd = file.commit();
}

RankLock& RankLock::operator=(RankLock&& other) noexcept {
  if (this != &other) {
    release();
    m_fd = std::move(other.m_fd);
  }
  return *this;
}

RankLock::~RankLock() {
  release();
}

void RankLock::release() noexcept {
  if (!m_fd) return;
  ::unlink(m_fd.path().c_str());
  m_fd = FileDescriptor();
}

std::vector<StoreFile> list_store_files() {
  std::vector<StoreFile> out;
  std::error_code ec;
  const bool root = ::geteuid() == 0;
  for (const auto& entry : fs::directory_iterator(shm_directory(), ec)) {
    const auto file_name = entry.path().filename().native();
    std::string_view name = file_name;
    if (!name.starts_with(prefix)) continue;
    const auto id = name.substr(prefix.size(), 12);
    if (!is_store_id(id) || name.size() <= prefix.size() + 13 || name[prefix.size() + 12] != '-')
      continue;
    StoreFile file{std::string(id), -1, entry.path(), name.ends_with(lock_suffix)};
    if (file.is_lock) name.remove_suffix(lock_suffix.size());
    file.rank = trailing_rank(name);
    if (file.rank < 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (!root && st.st_uid != ::geteuid()) continue;
    out.push_back(std::move(file));
  }
  return out;
}

RankPresence rank_presence(const std::string& store_id, int rank) {
  const auto path = shm_directory() / RankLock::file_name(store_id, rank);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return errno == ENOENT ? RankPresence::absent : RankPresence::live;  // unreadable: assume alive
  FileDescriptor owned(fd, path);
  // Taking the lock ourselves is the test; it is dropped when `owned` closes.
  return ::flock(fd, LOCK_SH | LOCK_NB) == 0 ? RankPresence::gone : RankPresence::live;
}

int64_t recorded_pid(const fs::path& lock_file) {
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  FileDescriptor owned(fd, lock_file);
  char text[24] = {};
  const auto n = ::pread(fd, text, sizeof text - 1, 0);
  int64_t pid = 0;
  if (n <= 0) return 0;
  std::from_chars(text, text + n, pid);
  return pid > 0 ? pid : 0;
}

int64_t rank_lock_holder(const std::string& store_id, int rank) {
  const auto path = shm_directory() / RankLock::file_name(store_id, rank);
  if (rank_presence(store_id, rank) != RankPresence::live) return 0;
  struct stat lock {};
  if (::stat(path.c_str(), &lock) != 0) return 0;
  const auto pid = recorded_pid(path);
  if (pid <= 0) return 0;
  // increment(ec), not a range-for: the process may exit mid-listing, and operator++ throws.
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0 && same_file(st, lock)) return pid;
  }
  return 0;
}

bool rank_gone_here(const std::string& store_id, int rank, int64_t pid) {
  switch (rank_presence(store_id, rank)) {
    case RankPresence::live:
      return false;
    case RankPresence::gone:
      return true;
    case RankPresence::absent:
      break;
  }
  if (pid <= 0 || !process_alive(pid)) return true;
  // A pid reused by a process whose /dev/shm has no such lock is not the rank.
  const auto there = fs::path("/proc") / std::to_string(pid) / "root" /
                     shm_directory().relative_path() / RankLock::file_name(store_id, rank);
  struct stat st {};
  if (::lstat(there.c_str(), &st) == 0) return false;
  return errno == ENOENT;
}

std::vector<fs::path> fabric_queues(int64_t pid, uid_t owner) {
  const std::string prefix = std::to_string(pid) + ":";
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(shm_directory(), ec)) {
    struct stat st {};
    if (entry.path().filename().native().starts_with(prefix) &&
        ::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner)
      out.push_back(entry.path());
  }
  return out;
}

}  // namespace ddstage::detail
