#include "ddstage/index.hpp"

#include <sys/stat.h>

#include <cstring>

#include <xxhash.h>

#include "ddstage/error.hpp"
#include "index_layout.hpp"
#include "manifest.hpp"

namespace ddstage {
namespace {

using detail::FileRecord;
using detail::IndexHeader;

uint64_t header_checksum(IndexHeader header) {
  header.header_checksum = 0;
  return XXH3_64bits(&header, sizeof header);
}

/// Validates the fixed part of index.bin before anything in it is trusted.
IndexHeader check_header(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  const std::string name = path.string();
  IndexHeader h{};
  if (bytes.size() < sizeof h) throw IndexError(name + " is truncated (" + std::to_string(bytes.size()) + " bytes)");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, detail::index_magic, sizeof h.magic) != 0) {
    throw IndexError(name + " is not a ddstage index (bad magic)");
  }
  if (h.version > index_format_version) {
    throw IndexError(name + " was written by a newer ddstage (index format " + std::to_string(h.version) +
                     "; this build reads up to " + std::to_string(index_format_version) + ")");
  }
  if (h.header_checksum != header_checksum(h)) throw IndexError(name + " is corrupt (header checksum mismatch)");
  if (h.file_bytes != bytes.size()) {
    throw IndexError(name + " is truncated or padded: header says " + std::to_string(h.file_bytes) +
                     " bytes, file has " + std::to_string(bytes.size()));
  }
  const uint64_t entry_bytes = h.samples * h.fields * sizeof(Entry);
  if (h.fields == 0 || h.entries_offset + entry_bytes > h.file_table_offset ||
      h.file_table_offset + uint64_t{h.files} * sizeof(FileRecord) > h.names_offset ||
      h.names_offset > h.file_bytes || h.entries_offset % 8 != 0) {
    throw IndexError(name + " is corrupt (inconsistent section offsets)");
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
    if (r.name_offset + r.name_length > names_size || r.kind > 2) {
      throw IndexError(path.string() + " is corrupt (file table row " + std::to_string(i) + ")");
    }
    files[i] = {std::string(names + r.name_offset, r.name_length), static_cast<FileKind>(r.kind), r.size,
                r.mtime_ns};
  }
  return files;
}

}  // namespace

Index Index::open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(dir.string() + " is not a ddstage index (" +
                     (std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory") + ")");
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
  if (header.samples != manifest.samples || header.fields != manifest.fields.size()) {
    throw IndexError((dir / "manifest.yaml").string() + " does not match index.bin (samples or fields differ)");
  }
  index.m_manifest = std::move(manifest.info);
  index.m_fields = std::move(manifest.fields);
  index.m_samples = header.samples;
  index.m_fingerprint = header.header_checksum;
  index.m_files = read_file_table(bytes, header, dir / "index.bin");
  index.m_entries = reinterpret_cast<const Entry*>(bytes.data() + header.entries_offset);
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
  throw UsageError("dataset '" + m_manifest.name + "' has several fields; pass --field (one of: " + names + ")");
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
    throw StaleError("source " + path.string() + " is missing (it was there when '" + m_manifest.name +
                     "' was flattened)", {.file = path.string()});
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
