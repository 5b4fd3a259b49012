#include "process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

std::string host_name() {
  std::array<char, HOST_NAME_MAX + 1> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return {};
  return name.data();
}

}  // namespace ddstage

namespace ddstage::detail {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

bool signal_reaches(int64_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

/// /proc/PID/stat, or empty when it cannot be read. A plain read(2): the process may exit
/// between open and read (ESRCH), which libstdc++'s filebuf would throw as an exception.
std::string proc_stat(int64_t pid) {
  const auto path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const FileDescriptor owner(fd, path);
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  do {
    n = ::read(fd, buf.data(), buf.size());
  } while (n < 0 && errno == EINTR);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

bool process_alive(int64_t pid) {
  if (pid <= 0 || !signal_reaches(pid)) return false;
  // /proc/PID/stat is "PID (COMM) STATE ...": COMM may contain ')', so take the last one.
  const std::string stat = proc_stat(pid);
  const auto paren = stat.rfind(')');
  // Unreadable: the process exited just now (kill says so), or there is no procfs (trust kill).
  if (paren == std::string::npos || paren + 2 >= stat.size()) return signal_reaches(pid);
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

MemoryLimit default_memory_limit(int holders_on_node, const std::filesystem::path& shm_dir) {
  const auto holders = static_cast<uint64_t>(std::max(1, holders_on_node));
  MemoryLimit limit{mem_available() / 10 * 8, "80% of MemAvailable"};
  struct statvfs fs {};
  if (::statvfs(shm_dir.c_str(), &fs) == 0) {
    if (const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
        free < limit.bytes) {
      limit = {free, "free space of " + shm_dir.string()};
    }
  }
  limit.bytes /= holders;
  if (holders > 1) limit.source += fmt::format(", shared by {} holders on this node", holders);
  return limit;
}

uint64_t default_mem_limit(int holders_on_node) {
  return default_memory_limit(holders_on_node).bytes;
}

}  // namespace ddstage::detail
