#include "support/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <optional>

#include "ddstage/error.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;

/// Linux's limit on symlinks followed while resolving one path (SYMLOOP_MAX).
constexpr int max_symlink_hops = 40;

/// The descriptor a name stands for when it names one of this process's own.
std::optional<int> own_descriptor(const std::string& path) {
  if (path.empty() || path == "-" || path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!path.starts_with(prefix)) continue;
    int fd = -1;
    const auto* first = path.data() + prefix.size();
    const auto* last = path.data() + path.size();
    auto [end, ec] = std::from_chars(first, last, fd);
    if (ec == std::errc() && end == last && first != last) return fd;
  }
  return std::nullopt;
}

/// The name a chain of symlinks ends at (it may not exist yet: a dangling link is written
/// through to its target, as `cat > link` does).
fs::path final_target(fs::path path) {
  for (int hop = 0; hop < max_symlink_hops; ++hop) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
    auto link = fs::read_symlink(path, ec);
    if (ec) throw IoError("cannot read the symlink " + path.string(), ec.value(), {.file = path.string()});
    path = link.is_absolute() ? link : path.parent_path() / link;
  }
  throw UsageError("output " + path.string() + ": too many levels of symbolic links");
}

/// Creates a fresh temporary file beside target. The kernel applies the umask to a new name;
/// a file being replaced keeps its permission bits.
FileDescriptor create_beside(const std::string& target, const std::string& shown, std::string& tmp) {
  struct stat st {};
  const bool replacing = ::stat(target.c_str(), &st) == 0;
  const mode_t mode = replacing ? (st.st_mode & 07777) : 0666;
  const auto stem = target + ".partial-" + std::to_string(::getpid());
  for (int attempt = 0;; ++attempt) {
    tmp = attempt == 0 ? stem : stem + "-" + std::to_string(attempt);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
      if (replacing) ::fchmod(fd, mode);
      return FileDescriptor(fd, tmp);
    }
    // A crashed run with a recycled pid may have left the name behind: try the next one.
    if (errno != EEXIST || attempt == 100) {
      const int err = errno;
      tmp.clear();
      throw IoError("cannot write " + shown, err, {.file = shown});
    }
  }
}

}  // namespace

OutputFile::OutputFile(const std::string& path) : m_path(path) {
  if (auto fd = own_descriptor(path)) {
    const auto shown = path.empty() ? std::string("stdout") : path;
    m_fd = FileDescriptor(::fcntl(*fd, F_DUPFD_CLOEXEC, 0), shown);
    if (!m_fd) throw IoError("cannot write to " + shown, errno);
    return;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw UsageError("output " + path + " is a directory");
    // Neither O_CREAT nor O_TRUNC: a device or FIFO is written through, never replaced.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw IoError("cannot write " + path, errno, {.file = path});
    m_fd = FileDescriptor(fd, path);
    return;
  }
  m_target = final_target(path).string();
  m_fd = create_beside(m_target, path, m_tmp);
}

OutputFile::~OutputFile() {
  if (!m_tmp.empty()) ::unlink(m_tmp.c_str());
}

void OutputFile::commit() {
  m_fd.close();
  if (m_tmp.empty()) return;
  if (::rename(m_tmp.c_str(), m_target.c_str()) != 0) throw IoError("cannot write " + m_path, errno, {.file = m_path});
  m_tmp.clear();
}

void write_text_file(const std::string& path, std::string_view text) {
  OutputFile out(path);
  out.write(text);
  out.commit();
}

}  // namespace ddstage::cli
