#include "bench/page_cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::cli {

std::vector<std::filesystem::path> index_files(const Index& index,
                                               std::initializer_list<FileKind> kinds) {
  std::vector<std::filesystem::path> files;
  for (uint32_t i = 0; i < index.files().size(); ++i) {
    if (std::find(kinds.begin(), kinds.end(), index.files()[i].kind) != kinds.end())
      files.push_back(index.resolve(i));
  }
  return files;
}

void drop_cached_pages(const std::vector<std::filesystem::path>& files) {
  for (const auto& path : files) {
    auto fd = FileDescriptor::open(path, O_RDONLY);
    if (::fdatasync(fd.get()) != 0) throw IoError("fdatasync " + path.string(), errno);
    if (int rc = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED); rc != 0) {
      throw IoError("posix_fadvise " + path.string(), rc);
    }
  }
}

uint64_t read_sequentially(const std::vector<std::filesystem::path>& files) {
  std::vector<std::byte> buffer(1u << 20);
  uint64_t total = 0;
  for (const auto& path : files) {
    auto fd = FileDescriptor::open(path, O_RDONLY);
    for (ssize_t n; (n = ::read(fd.get(), buffer.data(), buffer.size())) != 0;
         total += static_cast<uint64_t>(n)) {
      if (n < 0) throw IoError("read " + path.string(), errno);
    }
  }
  return total;
}

}  // namespace ddstage::cli
