// The "npy" format: each .npy file is one field, named after the file's stem; sample i is row i
// (index i along dim 0) of every file, referenced in place.

#include <fcntl.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "block_reader.hpp"
#include "builtin_formats.hpp"
#include "ddstage/error.hpp"
#include "npy_header.hpp"

namespace ddstage::formats {
namespace detail {
namespace {

namespace fs = std::filesystem;

struct NpySource {
  std::string name;   // as the user gave it
  std::string field;  // the file stem
  FileDescriptor fd;
  NpyHeader header;
};

/// Opens one source and checks it can be a field: rows along dim 0, C order, all data present.
NpySource open_source(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    throw UsageError(fmt::format("{} does not exist", path), {.file = path});
  }
  if (fs::is_directory(status)) {
    throw UsageError(fmt::format("{} is a directory; the npy format takes .npy files", path),
                     {.file = path});
  }
  auto fd = FileDescriptor::open(path, O_RDONLY);
  NpyHeader h = read_npy_header(fd);
  if (h.shape.empty()) {
    throw UsageError(
        fmt::format("{} holds a scalar (shape ()); a field needs rows along its first dimension",
                    path),
        {.file = path});
  }
  // 1-D arrays are the same in either order; beyond that a Fortran row is strided, not a range.
  if (h.fortran_order && h.shape.size() > 1) {
    throw UsageError(fmt::format("{} is in Fortran order, so its rows are not contiguous; "
                                 "re-save it with numpy.ascontiguousarray",
                                 path),
                     {.file = path});
  }
  const uint64_t expected = h.data_offset + h.data_bytes;
  const uint64_t found = fd.size();
  if (found < expected) {
    throw UsageError(
        fmt::format("{} is truncated: expected {} bytes, found {}", path, expected, found),
        {.file = path});
  }
  if (found > expected)
    spdlog::warn("{}: ignoring {} bytes after the array", path, found - expected);
  return NpySource{
      .name = path, .field = fs::path(path).stem().string(), .fd = std::move(fd), .header = h};
}

/// Field names must be unique and every field must have the same number of rows.
void check_consistent(const std::vector<NpySource>& sources) {
  std::map<std::string, const NpySource*> by_field;
  for (const auto& s : sources) {
    const auto [it, inserted] = by_field.emplace(s.field, &s);
    if (!inserted) {
      throw UsageError(
          fmt::format("{} and {} would both be field '{}' (fields are named after the "
                      "file stem); rename one",
                      it->second->name, s.name, s.field));
    }
    const auto& first = sources.front();
    if (s.header.shape[0] != first.header.shape[0]) {
      throw UsageError(
          fmt::format("{} has {} rows but {} has {}; every .npy source needs the same "
                      "first dimension",
                      first.name, first.header.shape[0], s.name, s.header.shape[0]));
    }
  }
}

FieldInfo field_info(const NpySource& s) {
  return FieldInfo{.name = s.field,
                   .dtype = s.header.dtype,
                   .shape = {s.header.shape.begin() + 1, s.header.shape.end()},
                   .variable = false,
                   .row_bytes = s.header.row_bytes,
                   .source = s.name};
}

bool detect(const FlattenRequest& request) {
  const auto& first = request.sources.front();
  std::error_code ec;
  if (first.ends_with(".npy")) return !fs::is_directory(first, ec);
  std::ifstream in(first, std::ios::binary);
  std::string magic(npy_magic.size(), '\0');
  return in.read(magic.data(), static_cast<std::streamsize>(magic.size())) && magic == npy_magic;
}

void flatten(const FlattenRequest& request, IndexWriter& writer) {
  std::vector<NpySource> sources;
  for (const auto& path : request.sources) sources.push_back(open_source(path));
  check_consistent(sources);

  std::vector<FieldInfo> fields;
  for (const auto& s : sources) fields.push_back(field_info(s));
  const uint64_t rows = sources.front().header.shape[0];
  writer.define(std::move(fields), rows);

  BlockReader reader(request.memory_budget);
  for (uint32_t f = 0; f < sources.size(); ++f) {
    const auto& s = sources[f];
    // Recorded even when packed: the manifest names every source, and bench compares against it.
    const uint32_t file = writer.add_source(s.fd.path());
    std::optional<uint32_t> in_place;
    if (!request.pack) in_place = file;
    put_records(writer, reader, s.fd,
                RecordRange{.field = f,
                            .first_sample = 0,
                            .offset = s.header.data_offset,
                            .record_bytes = s.header.row_bytes,
                            .count = rows},
                in_place);
  }
}

}  // namespace
}  // namespace detail

Format npy_format() {
  return Format{.name = "npy",
                .help =
                    "NumPy .npy files (format 1.0-3.0): each file is a field named after its "
                    "stem, sample i is row i of every file",
                .detect = &detail::detect,
                .flatten = &detail::flatten};
}

}  // namespace ddstage::formats
