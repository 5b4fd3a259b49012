// The "files" format: every plain file is one sample of one opaque field, "data".

#include <fcntl.h>

#include <fmt/format.h>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "block_reader.hpp"
#include "builtin_formats.hpp"
#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace detail {
namespace {

namespace fs = std::filesystem;

/// Appends the regular files under dir, sorted by relative path in byte order so the sample ids
/// do not depend on the file system's directory order. Symlinks to files count as files;
/// symlinked directories are not descended, so a link back up the tree cannot loop.
void collect_directory(const fs::path& dir, const std::string& where, const IndexWriter& writer,
                       std::vector<fs::path>& out) {
  std::vector<std::string> relative;
  std::error_code ec;
  // The iterator's error does not say where; descending into the last directory seen is what
  // fails (e.g. EACCES), so that is the one to name.
  fs::path last_dir = dir;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    // An index written inside its own source tree (or its temporary directory) is not data.
    if (writer.is_own_path(it->path())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) {
      relative.push_back(it->path().lexically_relative(dir).generic_string());
    } else if (it->is_directory(ec)) {
      last_dir = it->path();
    }
    ec.clear();  // a dangling or looping link is simply not a file
  }
  if (ec)
    throw IoError("cannot read directory " + last_dir.string(), ec.value(),
                  {.file = last_dir.string()});
  if (relative.empty())
    throw UsageError(fmt::format("{}directory {} contains no files", where, dir.string()));
  std::sort(relative.begin(), relative.end());
  for (const auto& r : relative) out.push_back(dir / r);
}

/// Appends one path named on the command line or in a list; `where` prefixes errors with the
/// list file and line it came from (empty for the command line).
void collect_path(const fs::path& path, const std::string& where, const IndexWriter& writer,
                  std::vector<fs::path>& out) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    throw UsageError(fmt::format("{}{} does not exist", where, path.string()),
                     {.file = path.string()});
  }
  if (ec) throw IoError("stat " + path.string(), ec.value(), {.file = path.string()});
  if (fs::is_directory(status)) return collect_directory(path, where, writer, out);
  if (!fs::is_regular_file(status)) {
    throw UsageError(fmt::format("{}{} is not a regular file or directory", where, path.string()),
                     {.file = path.string()});
  }
  out.push_back(path);
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t") == std::string::npos;
}

/// Reads "@list.txt": one path per line, blank lines and '#' comments skipped. Relative paths are
/// relative to the list file's directory, not the working directory, so a dataset directory
/// can carry its own list and be flattened from anywhere.
void collect_list(const fs::path& list, const IndexWriter& writer, std::vector<fs::path>& out) {
  std::error_code ec;
  if (!fs::exists(list, ec)) {
    throw UsageError(fmt::format("list file {} does not exist", list.string()),
                     {.file = list.string()});
  }
  std::ifstream in(list);
  if (!in) throw IoError("cannot read list file " + list.string(), errno, {.file = list.string()});
  const auto base = list.parent_path();
  const auto before = out.size();
  std::string line;
  for (uint64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // lists written on Windows
    if (is_blank(line) || line.front() == '#') continue;
    collect_path(base / line, fmt::format("{} line {}: ", list.string(), number), writer, out);
  }
  if (in.bad()) throw IoError("reading list file " + list.string(), errno, {.file = list.string()});
  if (out.size() == before)
    throw UsageError(fmt::format("list file {} names no files", list.string()));
}

std::vector<fs::path> collect_sources(const std::vector<std::string>& sources,
                                      const IndexWriter& writer) {
  std::vector<fs::path> files;
  for (const auto& source : sources) {
    if (source.starts_with('@')) {
      collect_list(source.substr(1), writer, files);
    } else {
      collect_path(source, "", writer, files);
    }
  }
  return files;
}

bool detect_files(const FlattenRequest& request) {
  const auto& first = request.sources.front();
  std::error_code ec;
  return first.starts_with('@') || fs::is_directory(first, ec);
}

/// Files opened ahead of the one being read, each with POSIX_FADV_WILLNEED, so the disk or
/// parallel file system has many reads in flight instead of one: a serial open/read loop over
/// a million small files waits out each file's latency in turn (that is all `cat` does).
class Prefetcher {
 public:
  /// Up to 64 ahead, and never more than an eighth of the open-file limit.
  explicit Prefetcher(const std::vector<fs::path>& files)
      : m_files(files), m_window(std::clamp<std::size_t>(open_file_limit() / 8, 1, 64)) {}

  /// The open file `i`; calls must come in increasing order.
  FileDescriptor take(std::size_t i) {
    while (m_next < m_files.size() && m_next < i + m_window) {
      auto fd = FileDescriptor::open(m_files[m_next++], O_RDONLY);
      ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);  // advisory: errors do not matter
      m_ahead.push_back(std::move(fd));
    }
    auto fd = std::move(m_ahead.front());
    m_ahead.pop_front();
    return fd;
  }

 private:
  const std::vector<fs::path>& m_files;
  std::size_t m_window;
  std::deque<FileDescriptor> m_ahead;
  std::size_t m_next = 0;
};

void flatten_files(const FlattenRequest& request, IndexWriter& writer) {
  const auto files = collect_sources(request.sources, writer);
  writer.define({FieldInfo{.name = "data",
                           .dtype = DType::bytes,
                           .shape = {},
                           .variable = true,
                           .row_bytes = 0,
                           .source = "file contents"}},
                files.size());
  BlockReader reader(request.memory_budget);
  Prefetcher prefetch(files);
  for (uint64_t sample = 0; sample < files.size(); ++sample) {
    const auto fd = prefetch.take(sample);
    const uint64_t size = fd.size();
    // Recorded even when packed: the manifest names every source, and bench compares against it.
    const uint32_t file = writer.add_source(files[sample]);
    std::optional<uint32_t> in_place;
    if (!request.pack) in_place = file;
    put_records(
        writer, reader, fd,
        RecordRange{
            .field = 0, .first_sample = sample, .offset = 0, .record_bytes = size, .count = 1},
        in_place);
  }
}

}  // namespace
}  // namespace detail

Format files_format() {
  return Format{.name = "files",
                .help =
                    "plain files: directories (recursive, sorted), files or @list.txt; "
                    "each file is one sample",
                .detect = &detail::detect_files,
                .flatten = &detail::flatten_files};
}

}  // namespace ddstage::formats
