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
    if (ec)
      throw IoError("cannot read the symlink " + path.string(), ec.value(),
                    {.file = path.string()});
    path = link.is_absolute() ? link : path.parent_path() / link;
  }
  throw UsageError("output " + path.string() + ": too many levels of symbolic links");
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
  m_file.emplace(final_target(path));
}

void OutputFile::write(std::span<const std::byte> bytes) {
  if (m_file) {
    m_file->write(bytes);
  } else {
    m_fd.write_all(bytes);
  }
}

void OutputFile::commit() {
  if (m_file) m_fd = m_file->commit();
  m_fd.close();
}

bool names_stdout(const std::string& path) {
  return own_descriptor(path) == STDOUT_FILENO;
}

void write_text_file(const std::string& path, std::string_view text) {
  OutputFile out(path);
  out.write(text);
  out.commit();
}

}  // namespace ddstage::cli
