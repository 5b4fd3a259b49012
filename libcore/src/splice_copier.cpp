#include "ddstage/tool/splice_copier.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

/// Pipe size asked for: each splice pair then moves up to 1 MiB (the default limit on what an
/// unprivileged process may ask, /proc/sys/fs/pipe-max-size) instead of the default 64 KiB.
constexpr int wanted_pipe_bytes = 1 << 20;
/// Past the per-user limit on pipe pages (/proc/sys/fs/pipe-user-pages-soft) a new pipe keeps
/// 2 pages and cannot grow: a splice pair per 8 KiB costs more than the page faults of a pread
/// into the segment's mapping, so below this the copier declines.
constexpr int min_pipe_bytes = 256 << 10;

}  // namespace

bool SpliceCopier::open_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    // Out of descriptors, or past fs.pipe-user-pages-hard: the mapping path needs no pipe.
    if (errno == EMFILE || errno == ENFILE) return false;
    throw IoError("pipe2", errno);
  }
  FileDescriptor read_end(fds[0], "pipe");
  FileDescriptor write_end(fds[1], "pipe");
  int size = ::fcntl(fds[1], F_SETPIPE_SZ, wanted_pipe_bytes);
  if (size < 0) size = ::fcntl(fds[1], F_GETPIPE_SZ);
  if (size < 0) throw IoError("fcntl(F_GETPIPE_SZ) of a pipe", errno);
  if (size < min_pipe_bytes) return false;
  // Stored only now: a copier holds a pipe only once it is fit to copy through.
  m_read_end = std::move(read_end);
  m_write_end = std::move(write_end);
  m_capacity = static_cast<std::size_t>(size);
  return true;
}

bool SpliceCopier::copy(const FileDescriptor& from, uint64_t from_offset, const FileDescriptor& to,
                        uint64_t to_offset, uint64_t bytes) {
  if (m_declined) return false;
  if (!m_read_end && !open_pipe()) {
    // Asked once per copier (one per load stream): the next load asks the system again.
    m_declined = true;
    return false;
  }
  try {
    uint64_t done = 0;
    while (done < bytes) {
      auto in = static_cast<loff_t>(from_offset + done);
      const ssize_t n = ::splice(from.get(), &in, m_write_end.get(), nullptr,
                                 std::min<uint64_t>(m_capacity, bytes - done), SPLICE_F_MOVE);
      if (n < 0 && errno == EINTR) continue;
      // The pipe is empty whenever splice is asked to fill it: nothing is left half-copied.
      if (n < 0 && (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) return false;
      if (n < 0)
        throw IoError("splice from " + from.path().string(), errno, {.file = from.path().string()});
      if (n == 0) throw unexpected_end(from.path(), from_offset + done);
      drain(to, to_offset + done, static_cast<std::size_t>(n));
      done += static_cast<uint64_t>(n);
    }
    return true;
  } catch (...) {
    // Bytes may be left in the pipe: the next copy must not write them out.
    m_read_end = FileDescriptor();
    m_write_end = FileDescriptor();
    throw;
  }
}

void SpliceCopier::drain(const FileDescriptor& to, uint64_t to_offset, std::size_t bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    auto out = static_cast<loff_t>(to_offset + done);
    const ssize_t n =
        ::splice(m_read_end.get(), nullptr, to.get(), &out, bytes - done, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw IoError("splice into " + to.path().string(), n < 0 ? errno : EIO,
                    {.file = to.path().string()});
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace ddstage
