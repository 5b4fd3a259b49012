#include "ddstage/tool/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

/// Tries this many random names before giving up: a collision means a full directory of
/// leftovers, or someone planting names on purpose.
constexpr int max_name_attempts = 100;

/// Opens a fresh temporary file beside target and fills in its name.
FileDescriptor create_beside(const std::filesystem::path& target, std::optional<mode_t> mode,
                             std::filesystem::path& temp) {
  struct stat st {};
  if (!mode && ::stat(target.c_str(), &st) == 0) mode = st.st_mode & 07777;
  std::random_device random;
  for (int attempt = 0;; ++attempt) {
    temp = fmt::format("{}.partial-{:08x}", target.string(), random());
    // 0666 when no mode is asked: the kernel then applies the umask as for any new file.
    const int fd =
        ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode.value_or(0666));
    if (fd >= 0) {
      FileDescriptor owned(fd, target);
      if (mode && ::fchmod(fd, *mode) != 0) {
        const int err = errno;
        ::unlink(temp.c_str());
        throw IoError("chmod " + temp.string(), err, {.file = target.string()});
      }
      return owned;
    }
    if (errno != EEXIST || attempt == max_name_attempts) {
      const int err = errno;
      temp.clear();
      throw IoError("cannot write " + target.string(), err, {.file = target.string()});
    }
  }
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target, std::optional<mode_t> mode)
    : m_target(std::move(target)) {
  m_fd = create_beside(m_target, mode, m_temp);
}

AtomicFile::~AtomicFile() {
  if (!m_temp.empty() && ::unlink(m_temp.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cannot remove {}: errno {}", m_temp.string(), errno);
  }
}

FileDescriptor AtomicFile::commit() {
  if (m_temp.empty())
    throw std::logic_error("AtomicFile::commit called twice for " + m_target.string());
  m_fd.sync();
  if (::rename(m_temp.c_str(), m_target.c_str()) != 0) {
    throw IoError("cannot write " + m_target.string() + " (rename " + m_temp.string() + ")", errno,
                  {.file = m_target.string()});
  }
  m_temp.clear();
  return std::move(m_fd);
}

}  // namespace ddstage
