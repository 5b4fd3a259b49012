// The "npy" format: each .npy file, and each member of a .npz archive, is one field; sample i is
// row i (index i along dim 0) of every array. Rows are referenced in place where the bytes on
// disk are what numpy returns (little-endian .npy files, stored .npz members); big-endian arrays
// and deflated members are converted once into pack files.

#include <fcntl.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "block_reader.hpp"
#include "builtin_formats.hpp"
#include "ddstage/error.hpp"
#include "npy_header.hpp"
#include "zip_directory.hpp"
#include "zip_inflate.hpp"

namespace ddstage::formats {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view npy_suffix = ".npy";

struct SourceFile {
  std::string path;  // as the user gave it
  FileDescriptor fd;
};

/// One array that becomes one field: a .npy file, or a member of a .npz archive.
struct NpyArray {
  std::string name;   // for messages: the path, or "ARCHIVE (member M)"
  std::string path;   // how --field can name it: the path, or ARCHIVE/STEM
  std::string field;  // the file's or member's stem
  size_t file = 0;    // in the SourceFile list
  NpyHeader header;   // data_offset from the start of the file (of the member when deflated)
  std::optional<ZipMember> deflated;
};

bool is_npz(const std::string& path) {
  if (path.ends_with(".npz")) return true;
  std::ifstream in(path, std::ios::binary);
  std::string magic(zip_magic.size(), '\0');
  return in.read(magic.data(), static_cast<std::streamsize>(magic.size())) && magic == zip_magic;
}

/// A field needs rows along dim 0 in C order and every byte present (`available` bytes from
/// where the header starts, `begin`).
void check_array(const NpyArray& a, uint64_t begin, uint64_t available) {
  const auto& h = a.header;
  if (h.shape.empty()) {
    throw UsageError(
        fmt::format("{} holds a scalar (shape ()); a field needs rows along its first dimension",
                    a.name),
        {.file = a.name});
  }
  // 1-D arrays are the same in either order; beyond that a Fortran row is strided, not a range.
  if (h.fortran_order && h.shape.size() > 1) {
    throw UsageError(fmt::format("{} is in Fortran order, so its rows are not contiguous; "
                                 "re-save it with numpy.ascontiguousarray",
                                 a.name),
                     {.file = a.name});
  }
  const uint64_t expected = h.data_offset - begin + h.data_bytes;
  if (available < expected) {
    throw UsageError(
        fmt::format("{} is truncated: expected {} bytes, found {}", a.name, expected, available),
        {.file = a.name});
  }
  if (available > expected)
    spdlog::warn("{}: ignoring {} bytes after the array", a.name, available - expected);
}

void open_npy(const std::string& path, size_t file, const FileDescriptor& fd,
              std::vector<NpyArray>& arrays) {
  NpyArray a{.name = path,
             .path = path,
             .field = fs::path(path).stem().string(),
             .file = file,
             .header = read_npy_header(fd)};
  check_array(a, 0, fd.size());
  arrays.push_back(std::move(a));
}

/// The header of a deflated member, inflated from its first bytes.
NpyHeader inflate_header(const FileDescriptor& fd, const ZipMember& m, const std::string& name,
                         uint64_t memory_budget) {
  ZipInflater inflater(fd, m, name, memory_budget);
  return read_npy_header([&](std::span<std::byte> out) { inflater.read(out); }, m.size, name);
}

/// Every member of a .npz archive, each an array named after the member less ".npy".
void open_npz(const std::string& path, size_t file, const FileDescriptor& fd,
              uint64_t memory_budget, std::vector<NpyArray>& arrays) {
  // zipfile would find an archive after other bytes, but numpy.load takes a file for a .npz
  // only when it starts with a member or an end record: anything else is not one to numpy.
  std::string magic(zip_magic.size(), '\0');
  fd.pread_exact(
      std::as_writable_bytes(std::span(magic)).first(std::min<uint64_t>(fd.size(), magic.size())),
      0);
  if (magic != zip_magic && magic != zip_empty_magic) {
    throw UsageError(fmt::format("{} does not start like a zip archive (numpy.load would not "
                                 "open it as a .npz)",
                                 path),
                     {.file = path});
  }
  const auto members = read_zip_directory(
      fd.size(), [&fd](std::span<std::byte> out, uint64_t offset) { fd.pread_exact(out, offset); },
      path);
  for (const auto& m : members) {
    if (m.name.ends_with('/')) continue;  // a directory entry
    const std::string name = fmt::format("{} (member {})", path, m.name);
    if (!m.name.ends_with(npy_suffix)) {
      throw UsageError(
          fmt::format("{}: not a .npy array (a .npz holds only NAME.npy members)", name),
          {.file = path});
    }
    // The flag bits numpy.load (zipfile) cannot read either: encrypted, patched data.
    if (m.flags & (zip_encrypted | zip_strong_encryption)) {
      throw UsageError(fmt::format("{}: the member is encrypted", name), {.file = path});
    }
    if (m.flags & zip_patched) {
      throw UsageError(fmt::format("{}: the member is compressed patched data", name),
                       {.file = path});
    }
    const std::string stem = m.name.substr(0, m.name.size() - npy_suffix.size());
    NpyArray a{.name = name, .path = path + "/" + stem, .field = stem, .file = file};
    if (m.method == 0) {
      if (m.size != m.compressed_size) {
        throw UsageError(fmt::format("{}: stored, yet its sizes differ ({} and {} bytes)", name,
                                     m.compressed_size, m.size),
                         {.file = path});
      }
      a.header = read_npy_header(fd, m.data_offset, m.size, name);
      check_array(a, m.data_offset, m.size);
      check_stored_crc(fd, m, name, memory_budget);
    } else if (m.method == 8) {
      a.header = inflate_header(fd, m, name, memory_budget);
      a.deflated = m;
      check_array(a, 0, m.size);
    } else {
      throw UsageError(fmt::format("{}: compression method {} is not supported (only stored, as "
                                   "numpy.savez writes, and deflated, as numpy.savez_compressed)",
                                   name, m.method),
                       {.file = path});
    }
    arrays.push_back(std::move(a));
  }
}

void open_sources(const FlattenRequest& request, std::vector<SourceFile>& files,
                  std::vector<NpyArray>& arrays) {
  for (const auto& path : request.sources) {
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) {
      throw UsageError(fmt::format("{} does not exist", path), {.file = path});
    }
    if (fs::is_directory(status)) {
      throw UsageError(
          fmt::format("{} is a directory; the npy format takes .npy and .npz files", path),
          {.file = path});
    }
    files.push_back({.path = path, .fd = FileDescriptor::open(path, O_RDONLY)});
    if (is_npz(path)) {
      open_npz(path, files.size() - 1, files.back().fd, request.memory_budget, arrays);
    } else {
      open_npy(path, files.size() - 1, files.back().fd, arrays);
    }
  }
}

/// `--field NAME=PATH` picks the arrays to index and names them: PATH is a .npy source, an
/// archive's member as ARCHIVE.npz/MEMBER, or an array's own name; without NAME= the field
/// keeps that name.
std::vector<NpyArray> select_fields(const std::vector<NpyArray>& arrays,
                                    const std::vector<FieldSpec>& specs) {
  if (specs.empty()) return arrays;
  const auto normal = [](const std::string& p) { return fs::path(p).lexically_normal(); };
  std::vector<NpyArray> chosen;
  for (const auto& spec : specs) {
    std::vector<const NpyArray*> matches;
    for (const auto& a : arrays) {
      const bool by_path = normal(spec.path) == normal(a.path) ||
                           normal(spec.path) == normal(a.path + std::string(npy_suffix));
      if (by_path || spec.path == a.field) matches.push_back(&a);
    }
    const std::string shown = spec.name.empty() ? spec.path : spec.name + "=" + spec.path;
    if (matches.empty()) {
      std::string names;
      for (const auto& a : arrays) names += (names.empty() ? "" : ", ") + a.path;
      throw UsageError(fmt::format("--field {}: no source array is '{}' (the arrays: {})", shown,
                                   spec.path, names));
    }
    if (matches.size() > 1) {
      throw UsageError(fmt::format("--field {}: '{}' is both {} and {}; name it by its path", shown,
                                   spec.path, matches[0]->path, matches[1]->path));
    }
    chosen.push_back(*matches.front());
    if (!spec.name.empty()) chosen.back().field = spec.name;
  }
  return chosen;
}

/// Field names must be unique and every field must have the same number of rows.
void check_consistent(const std::vector<NpyArray>& arrays, const FlattenRequest& request) {
  if (arrays.empty()) throw UsageError(fmt::format("{} holds no arrays", request.sources.front()));
  std::map<std::string, const NpyArray*> by_field;
  for (const auto& a : arrays) {
    const auto [it, inserted] = by_field.emplace(a.field, &a);
    if (!inserted) {
      throw UsageError(
          fmt::format("{} and {} would both be field '{}' (fields are named after the file "
                      "stem or archive member); rename one, or name them with --field NAME=PATH",
                      it->second->name, a.name, a.field));
    }
    const auto& first = arrays.front();
    if (a.header.shape[0] != first.header.shape[0]) {
      throw UsageError(
          fmt::format("{} has {} rows but {} has {}; every array needs the same first dimension",
                      first.name, first.header.shape[0], a.name, a.header.shape[0]));
    }
  }
}

FieldInfo field_info(const NpyArray& a) {
  const auto& h = a.header;
  std::vector<uint64_t> shape(h.shape.begin() + 1, h.shape.end());
  shape.insert(shape.end(), h.item_axes.begin(), h.item_axes.end());
  return FieldInfo{.name = a.field,
                   .dtype = h.dtype,
                   .shape = std::move(shape),
                   .variable = false,
                   .row_bytes = h.row_bytes,
                   .source = a.name,
                   .members = h.members,
                   .encoding = h.encoding};
}

/// Inflates a deflated member once, byte-swapping if need be, into pack files: rows in blocks
/// no larger than the budget; a row larger than the budget in pieces of whole elements. A few
/// hundred KB of deflate can claim a row of gigabytes (1,032:1): memory follows the budget,
/// never the row (issue 28).
void put_deflated(IndexWriter& writer, const FileDescriptor& fd, const NpyArray& a, uint32_t field,
                  uint64_t memory_budget) {
  const auto& h = a.header;
  const auto& m = *a.deflated;
  ZipInflater inflater(fd, m, a.name, memory_budget);
  const uint64_t rows = h.shape[0];
  const bool pieces = h.row_bytes > memory_budget;
  const uint64_t item = std::max<uint64_t>(1, h.item_bytes);  // swapped whole: pieces of items
  const uint64_t piece_bytes = std::max(item, memory_budget / item * item);
  const uint64_t per_block =
      std::max<uint64_t>(1, h.row_bytes == 0 ? rows : std::min(rows, memory_budget / h.row_bytes));
  std::vector<std::byte> block(
      std::max(h.data_offset, pieces ? piece_bytes : per_block * h.row_bytes));
  inflater.read(std::span(block).first(h.data_offset));
  for (uint64_t row = 0; pieces && row < rows; ++row) {
    writer.put_packed_pieces(row, field, h.row_bytes, piece_bytes, [&](std::span<std::byte> bytes) {
      inflater.read(bytes);
      h.to_little_endian(bytes);
    });
  }
  for (uint64_t first = 0; !pieces && first < rows; first += per_block) {
    const uint64_t count = std::min(per_block, rows - first);
    const auto bytes = std::span(block).first(count * h.row_bytes);
    inflater.read(bytes);
    h.to_little_endian(bytes);
    for (uint64_t i = 0; i < count; ++i)
      writer.put_packed(first + i, field, bytes.subspan(i * h.row_bytes, h.row_bytes));
  }
  // Bytes after the array (check_array warned): read through, so the CRC covers them too.
  for (uint64_t left = m.size - h.data_offset - h.data_bytes; left > 0;) {
    const auto piece = std::span(block).first(std::min<uint64_t>(left, block.size()));
    inflater.read(piece);
    left -= piece.size();
  }
  inflater.finish();
}

/// Big-endian rows are swapped into pack files: the index hands out what numpy returns once
/// converted to the host's order.
void put_swapped(IndexWriter& writer, BlockReader& reader, const FileDescriptor& fd,
                 const NpyArray& a, uint32_t field) {
  const auto& h = a.header;
  std::vector<std::byte> row(h.row_bytes);
  reader.for_each_record(fd, h.data_offset, h.row_bytes, h.shape[0],
                         [&](uint64_t i, std::span<const std::byte> bytes) {
                           std::memcpy(row.data(), bytes.data(), bytes.size());
                           h.to_little_endian(row);
                           writer.put_packed(i, field, row);
                         });
}

/// A zip archive whose first member is a .npy is a .npz, whatever its name.
bool starts_like_npz(std::string_view head) {
  constexpr size_t name_at = 30;
  if (head.size() < name_at || !head.starts_with(zip_magic)) return false;
  const size_t length = static_cast<unsigned char>(head[26]) | static_cast<unsigned char>(head[27])
                                                                   << 8;
  return head.size() >= name_at + length && head.substr(name_at, length).ends_with(npy_suffix);
}

bool detect_npy(const FlattenRequest& request) {
  const auto& first = request.sources.front();
  std::error_code ec;
  if (first.ends_with(".npy") || first.ends_with(".npz")) return !fs::is_directory(first, ec);
  std::ifstream in(first, std::ios::binary);
  std::string head(30 + 0xffff, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head.starts_with(npy_magic) || starts_like_npz(head);
}

void flatten_npy(const FlattenRequest& request, IndexWriter& writer) {
  // Ignoring them would index something else than the user asked for, silently.
  if (!request.groups.empty() || !request.ragged.empty()) {
    throw UsageError(
        "--groups and --ragged are HDF5 options; .npy and .npz sources take --field NAME=PATH");
  }
  std::vector<SourceFile> files;
  std::vector<NpyArray> all;
  open_sources(request, files, all);
  const auto arrays = select_fields(all, request.fields);
  check_consistent(arrays, request);

  std::vector<FieldInfo> fields;
  for (const auto& a : arrays) {
    fields.push_back(field_info(a));
    if (!a.header.numpy_descr.empty())
      writer.set_attribute("numpy_dtype." + a.field, a.header.numpy_descr);
  }
  const uint64_t rows = arrays.front().header.shape[0];
  if (rows == 0) {
    throw UsageError(fmt::format("no samples to index: {} has 0 rows (shape ({}))",
                                 arrays.front().name, fmt::join(arrays.front().header.shape, ", ")),
                     {.file = arrays.front().name});
  }
  writer.define(std::move(fields), rows);
  uint64_t total = 0;
  for (const auto& a : arrays) total += a.header.data_bytes;
  writer.expect_bytes(total);

  BlockReader reader(request.memory_budget);
  std::map<size_t, uint32_t> file_ids;
  for (uint32_t f = 0; f < arrays.size(); ++f) {
    const auto& a = arrays[f];
    const auto& fd = files[a.file].fd;
    // Recorded even when packed: the manifest names every source, and bench compares against it.
    if (!file_ids.contains(a.file)) file_ids[a.file] = writer.add_source(fd.path());
    if (a.deflated) {
      put_deflated(writer, fd, a, f, request.memory_budget);
    } else if (!a.header.swaps.empty()) {
      put_swapped(writer, reader, fd, a, f);
    } else {
      std::optional<uint32_t> in_place;
      if (!request.pack) in_place = file_ids[a.file];
      put_records(writer, reader, fd,
                  RecordRange{.field = f,
                              .first_sample = 0,
                              .offset = a.header.data_offset,
                              .record_bytes = a.header.row_bytes,
                              .count = rows},
                  in_place);
    }
  }
}

}  // namespace
}  // namespace detail

Format npy_format() {
  return Format{.name = "npy",
                .help =
                    "NumPy .npy files (format 1.0-3.0) and .npz archives: each file or "
                    "archive member is a field named after its stem (or --field "
                    "NAME=PATH), sample i is row i of every array",
                .detect = &detail::detect_npy,
                .flatten = &detail::flatten_npy};
}

}  // namespace ddstage::formats
