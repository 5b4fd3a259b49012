#include "ddstage/index.hpp"

#include <sys/stat.h>

#include <cstring>
#include <optional>

#include <fmt/format.h>

#include <xxhash.h>

#include "ddstage/error.hpp"
#include "index_layout.hpp"
#include "manifest.hpp"

namespace ddstage {
namespace {

using detail::FileRecord;
using detail::IndexHeader;

/// xxh3-64 of the header's first header_bytes with its checksum field zero: format 1 headers
/// end before fields_checksum.
uint64_t header_checksum(IndexHeader header) {
  header.header_checksum = 0;
  return XXH3_64bits(&header, header.header_bytes);
}

/// a + b, or nullopt when it wraps: every offset in index.bin may be crafted.
std::optional<uint64_t> add(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

/// The sections lie in order inside the file, each aligned for its records, without wrapping.
bool sections_fit(const IndexHeader& h) {
  uint64_t entry_bytes = 0;
  if (__builtin_mul_overflow(h.samples, uint64_t{h.fields} * sizeof(Entry), &entry_bytes))
    return false;
  const auto entries_end = add(h.entries_offset, entry_bytes);
  const auto table_end = add(h.file_table_offset, uint64_t{h.files} * sizeof(FileRecord));
  return h.entries_offset >= h.header_bytes && h.entries_offset % 8 == 0 &&
         h.file_table_offset % 8 == 0 && entries_end && *entries_end <= h.file_table_offset &&
         table_end && *table_end <= h.names_offset && h.names_offset <= h.file_bytes;
}

/// The header's size for its version: format 1 had no fields_checksum.
uint32_t expected_header_bytes(uint32_t version) {
  return version == 1 ? detail::header_bytes_v1 : static_cast<uint32_t>(sizeof(IndexHeader));
}

/// Validates the fixed part of index.bin before anything in it is trusted.
IndexHeader check_header(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  const std::string name = path.string();
  IndexHeader h{};
  if (bytes.size() < detail::header_bytes_v1) {
    throw IndexError(name + " is truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  std::memcpy(&h, bytes.data(), detail::header_bytes_v1);
  if (std::memcmp(h.magic, detail::index_magic, sizeof h.magic) != 0) {
    throw IndexError(name + " is not a ddstage index (bad magic)");
  }
  if (h.version > index_format_version) {
    throw IndexError(name + " was written by a newer ddstage (index format " +
                     std::to_string(h.version) + "; this build reads up to " +
                     std::to_string(index_format_version) + ")");
  }
  if (h.version == 0 || h.header_bytes != expected_header_bytes(h.version) ||
      h.header_bytes > bytes.size()) {
    throw IndexError(name + " is corrupt (header size " + std::to_string(h.header_bytes) +
                     " for format " + std::to_string(h.version) + ")");
  }
  std::memcpy(&h, bytes.data(), h.header_bytes);
  if (h.header_checksum != header_checksum(h))
    throw IndexError(name + " is corrupt (header checksum mismatch)");
  if (h.file_bytes != bytes.size()) {
    throw IndexError(name + " is truncated or padded: header says " + std::to_string(h.file_bytes) +
                     " bytes, file has " + std::to_string(bytes.size()));
  }
  if (h.fields == 0 || h.samples == 0 || !sections_fit(h)) {
    throw IndexError(name + " is corrupt (inconsistent section offsets or counts)");
  }
  auto body = bytes.subspan(h.entries_offset);
  if (XXH3_64bits(body.data(), body.size()) != h.body_checksum) {
    throw IndexError(name + " is corrupt (body checksum mismatch)");
  }
  return h;
}

std::vector<FileInfo> read_file_table(std::span<const std::byte> bytes, const IndexHeader& h,
                                      const std::filesystem::path& path) {
  std::vector<FileInfo> files(h.files);
  const auto* records = reinterpret_cast<const FileRecord*>(bytes.data() + h.file_table_offset);
  const auto* names = reinterpret_cast<const char*>(bytes.data() + h.names_offset);
  const uint64_t names_size = h.file_bytes - h.names_offset;
  for (uint32_t i = 0; i < h.files; ++i) {
    const auto& r = records[i];
    const auto name_end = add(r.name_offset, r.name_length);
    if (!name_end || *name_end > names_size || r.kind > 2) {
      throw IndexError(path.string() + " is corrupt (file table row " + std::to_string(i) + ")");
    }
    files[i] = {std::string(names + r.name_offset, r.name_length), static_cast<FileKind>(r.kind),
                r.size, r.mtime_ns};
  }
  return files;
}

/// The manifest describes the index.bin it came with: same counts, and (format 2 on) the very
/// field table index.bin was written with.
void check_manifest_matches(const detail::Manifest& m, const IndexHeader& h,
                            const std::filesystem::path& dir) {
  const auto manifest = (dir / "manifest.yaml").string();
  if (h.samples != m.samples || h.fields != m.fields.size()) {
    throw IndexError(manifest + " does not match index.bin (samples or fields differ)",
                     {.file = manifest});
  }
  if (h.version >= 2 && detail::fields_checksum(m.fields) != h.fields_checksum) {
    throw IndexError(
        manifest +
            " does not match index.bin: its field table (name, dtype, shape, variable, "
            "row_bytes) was changed after flattening; re-run flatten",
        {.file = manifest});
  }
}

/// One O(n) pass, as cheap as the body checksum before it: every entry names a file of the
/// table that reads may address, lies inside that file's recorded size, and is exactly as long
/// as the manifest says its field's rows are; the lengths add up to total_bytes. After this no
/// reader, loader or Python array can be sized by one number and filled by another.
void check_entries(std::span<const Entry> entries, std::span<const FieldInfo> fields,
                   std::span<const FileInfo> files, uint64_t total_bytes,
                   const std::filesystem::path& dir) {
  const auto index_bin = (dir / "index.bin").string();
  std::vector<uint64_t> units;
  for (const auto& f : fields)
    units.push_back(*detail::shape_bytes(f));  // checked by read_manifest
  uint64_t sum = 0;
  bool wrapped = false;
  for (uint64_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const FieldInfo& field = fields[i % fields.size()];
    const uint64_t unit = units[i % fields.size()];
    const auto bad = [&](const std::string& what) {
      return IndexError(fmt::format("{} is corrupt: the entry of sample {}, field '{}' {}",
                                    index_bin, i / fields.size(), field.name, what),
                        {.file = index_bin});
    };
    if (e.file >= files.size()) throw bad(fmt::format("names file {} of {}", e.file, files.size()));
    const FileInfo& file = files[e.file];
    if (file.kind == FileKind::copied)
      throw bad("names " + file.path + ", whose bytes were all copied into packs");
    const auto end = add(e.offset, e.length);
    if (!end || *end > file.size) {
      throw bad(fmt::format("lies past the end of {} (offset {} + length {}, file size {})",
                            file.path, e.offset, e.length, file.size));
    }
    if (!field.variable && e.length != field.row_bytes) {
      throw bad(fmt::format("holds {} bytes, but manifest.yaml gives the field row_bytes {}",
                            e.length, field.row_bytes));
    }
    if (field.variable && (unit ? e.length % unit != 0 : e.length != 0)) {
      throw bad(
          fmt::format("holds {} bytes, not a whole number of {}-byte elements", e.length, unit));
    }
    wrapped |= __builtin_add_overflow(sum, e.length, &sum);
  }
  if (wrapped || sum != total_bytes) {
    const auto manifest = (dir / "manifest.yaml").string();
    throw IndexError(
        fmt::format("{} does not match index.bin: total_bytes is {}, the entries hold {}", manifest,
                    total_bytes, wrapped ? "more than 2^64" : std::to_string(sum)),
        {.file = manifest});
  }
}

}  // namespace

Index Index::open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(dir.string() + " is not a ddstage index (" +
                     (std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory") +
                     ")");
  }
  if (!std::filesystem::exists(dir / "manifest.yaml", ec)) {
    throw UsageError(dir.string() + " is not a ddstage index (no manifest.yaml)");
  }
  if (!std::filesystem::exists(dir / "index.bin", ec)) {
    throw IndexError(dir.string() + " is damaged: manifest.yaml is there but index.bin is missing");
  }
  Index index;
  index.m_dir = std::filesystem::absolute(dir).lexically_normal();
  auto manifest = detail::read_manifest(dir / "manifest.yaml");
  index.m_map = MappedFile(dir / "index.bin", MappedFile::Mode::read_only);
  auto bytes = index.m_map.bytes();
  auto header = check_header(bytes, dir / "index.bin");
  check_manifest_matches(manifest, header, dir);
  index.m_manifest = std::move(manifest.info);
  index.m_fields = std::move(manifest.fields);
  index.m_samples = header.samples;
  index.m_fingerprint = header.header_checksum;
  index.m_files = read_file_table(bytes, header, dir / "index.bin");
  index.m_entries = reinterpret_cast<const Entry*>(bytes.data() + header.entries_offset);
  check_entries({index.m_entries, header.samples * header.fields}, index.m_fields, index.m_files,
                index.m_manifest.total_bytes, dir);
  return index;
}

uint32_t Index::field_id(std::string_view name) const {
  std::string names;
  for (uint32_t i = 0; i < m_fields.size(); ++i) {
    if (m_fields[i].name == name) return i;
    names += (i ? ", " : "") + m_fields[i].name;
  }
  throw UsageError("dataset '" + m_manifest.name + "' has no field '" + std::string(name) +
                   "' (fields: " + names + ")");
}

uint32_t Index::default_field() const {
  if (m_fields.size() == 1) return 0;
  std::string names;
  for (const auto& f : m_fields) names += (names.empty() ? "" : ", ") + f.name;
  throw UsageError("dataset '" + m_manifest.name +
                   "' has several fields; pass --field (one of: " + names + ")");
}

std::filesystem::path Index::resolve(uint32_t file) const {
  const auto& f = m_files.at(file);
  return f.kind == FileKind::pack ? m_dir / f.path : m_manifest.root / f.path;
}

void Index::check_fresh(uint32_t file) const {
  const auto path = resolve(file);
  const auto& f = m_files[file];
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw StaleError("source " + path.string() + " is missing (it was there when '" +
                         m_manifest.name + "' was flattened)",
                     {.file = path.string()});
  }
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (static_cast<uint64_t>(st.st_size) != f.size || mtime_ns != f.mtime_ns) {
    throw StaleError("source " + path.string() + " changed after it was flattened (size " +
                         std::to_string(f.size) + " -> " + std::to_string(st.st_size) +
                         (mtime_ns != f.mtime_ns ? ", mtime differs" : "") +
                         "); re-run flatten, or pass --allow-stale",
                     {.file = path.string()});
  }
}

void Index::check_all_fresh() const {
  for (uint32_t i = 0; i < m_files.size(); ++i) {
    if (m_files[i].kind != FileKind::copied) check_fresh(i);
  }
}

}  // namespace ddstage
