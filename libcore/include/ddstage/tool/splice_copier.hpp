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
class SpliceCopier {
 public:
  SpliceCopier() = default;

  /// Copies `bytes` bytes of `from` at from_offset into `to` at to_offset. Returns false, having
  /// written nothing that a plain read would not write again, when from's file system cannot
  /// splice: copy the range another way. Throws IoError naming the file for any other failure,
  /// and unexpected_end() when from ends first.
  bool copy(const FileDescriptor& from, uint64_t from_offset, const FileDescriptor& to,
            uint64_t to_offset, uint64_t bytes);

 private:
  void open_pipe();
  /// Moves the `bytes` bytes in the pipe into `to` at to_offset.
  void drain(const FileDescriptor& to, uint64_t to_offset, std::size_t bytes);

  FileDescriptor m_read_end;
  FileDescriptor m_write_end;
  std::size_t m_capacity = 0;
};

}  // namespace ddstage
