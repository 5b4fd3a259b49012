// Copying a byte range from one file into another without passing it through user memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage {

/// Copies byte ranges between files through a pipe of its own (splice(2)): the source's page
/// cache pages go into the pipe by reference and are copied once, into the destination's pages.
/// Into a shared-memory segment this fills its pages without the page fault and zero-fill per
/// 4 KiB page that a copy through a mapping of the segment pays. Move-only; one per thread.
///
/// Trade-off, accepted for loads (where OriginReader picks this over a pread into the
/// mapping): splice writes into one tmpfs file under its inode lock, so a rank's streams copy
/// into their segment one at a time, where copies through the mapping ran in parallel. Ranks
/// fill separate segments, so a node's parallelism comes from its ranks; here (2 cores) a warm
/// load ran 1.47x faster and page faults fell from 41% to 0.04% of a rank's time. One rank with
/// many streams on a big node may be capped near one core's copy rate: measure a warm
/// `ddstage bench load` with one rank and many streams there before relying on it.
class SpliceCopier {
 public:
  SpliceCopier() = default;

  /// Copies `bytes` bytes of `from` at from_offset into `to` at to_offset. Returns false, having
  /// written nothing that a plain read would not write again, when from's file system cannot
  /// splice, or when the system gives this copier's pipe under 256 KiB (past the per-user limit
  /// on pipe pages): copy the range another way. The pipe is made on the first copy; once it is
  /// too small, every copy declines. Throws IoError naming the file for any other failure,
  /// and unexpected_end() when from ends first.
  bool copy(const FileDescriptor& from, uint64_t from_offset, const FileDescriptor& to,
            uint64_t to_offset, uint64_t bytes);

 private:
  /// Makes and sizes the pipe; false, holding none, when the system allows too small a pipe.
  bool open_pipe();
  /// Moves the `bytes` bytes in the pipe into `to` at to_offset.
  void drain(const FileDescriptor& to, uint64_t to_offset, std::size_t bytes);

  FileDescriptor m_read_end;
  FileDescriptor m_write_end;
  std::size_t m_capacity = 0;
  bool m_declined = false;  ///< the pipe the system allowed was too small
};

}  // namespace ddstage
