// libarchive decodes the compression only (its "raw" format): the tar inside is read by our own
// reader (tar_reader.cpp), so compressed and plain shards get the same checks and names.
// Decoding into a temporary file rather than twice: the index needs every member's count before
// the first put, and decompression is the slow part.

#include "tar_decoder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <memory>
#include <string_view>
#include <vector>

#include "ddstage/error.hpp"

#if DDSTAGE_HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

namespace ddstage::formats {
namespace {

namespace fs = std::filesystem;

bool starts_with(std::span<const std::byte> head, std::string_view magic) {
  return head.size() >= magic.size() &&
         std::string_view(reinterpret_cast<const char*>(head.data()), magic.size()) == magic;
}

/// An unlinked file in dir: O_TMPFILE where the file system has it, else mkstemp + unlink. Its
/// path is /proc/self/fd/N, which reopens it: BlockReader maps large members by path.
FileDescriptor scratch_file(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string name = (dir / ".ddstage-tar-XXXXXX").string();
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd < 0)
      throw IoError("cannot create a scratch file in " + dir.string(), errno,
                    {.file = dir.string()});
    ::unlink(name.c_str());
  }
  return FileDescriptor(fd, fmt::format("/proc/self/fd/{}", fd));
}

}  // namespace

std::string compression_of(std::span<const std::byte> head) {
  if (starts_with(head, "\x1f\x8b")) return "gzip";
  if (starts_with(head, "BZh")) return "bzip2";
  if (starts_with(head, std::string_view("\xfd"
                                         "7zXZ\0",
                                         6)))
    return "xz";
  if (starts_with(head, "\x28\xb5\x2f\xfd")) return "zstd";
  return "";
}

#if DDSTAGE_HAVE_LIBARCHIVE

FileDescriptor decode_to_scratch(const fs::path& path, const fs::path& scratch_dir) {
  const auto refuse = [&path](const std::string& why) {
    return UsageError(fmt::format("{}: cannot decode: {}", path.string(), why),
                      {.file = path.string()});
  };
  std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), &archive_read_free);
  if (!a) throw std::bad_alloc();
  archive_read_support_filter_all(a.get());
  archive_read_support_format_raw(a.get());
  archive_entry* entry = nullptr;
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 20) != ARCHIVE_OK ||
      archive_read_next_header(a.get(), &entry) != ARCHIVE_OK) {
    throw refuse(archive_error_string(a.get()) ? archive_error_string(a.get()) : "unknown error");
  }
  auto out = scratch_file(scratch_dir);
  std::vector<std::byte> buffer(1 << 20);
  while (true) {
    const auto n = archive_read_data(a.get(), buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      throw refuse(archive_error_string(a.get()) ? archive_error_string(a.get())
                                                 : "unknown error (truncated?)");
    }
    out.write_all(std::span(buffer).first(static_cast<std::size_t>(n)));
  }
  return out;
}

#else

FileDescriptor decode_to_scratch(const fs::path& path, const fs::path&) {
  throw UsageError(fmt::format("{} is compressed and this build has no libarchive to decode it; "
                               "decompress it first, or rebuild with libarchive-dev installed",
                               path.string()),
                   {.file = path.string()});
}

#endif

}  // namespace ddstage::formats
