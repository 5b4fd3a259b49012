#include "ddstage/index.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include <xxhash.h>

#include "ddstage/error.hpp"
#include "index_layout.hpp"
#include "manifest.hpp"

namespace ddstage {
namespace {

using detail::EntryRecord;
using detail::FileRecord;
using detail::IndexHeader;
using detail::RunRecord;

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
/// Format 3's body is the field tables; their records are checked field by field.
bool sections_fit(const IndexHeader& h) {
  uint64_t entry_bytes = 0;
  const uint64_t per_sample = h.version >= 3 ? 0 : uint64_t{h.fields} * sizeof(EntryRecord);
  if (__builtin_mul_overflow(h.samples, per_sample, &entry_bytes)) return false;
  if (h.version >= 3) entry_bytes = uint64_t{h.fields} * sizeof(detail::FieldTable);
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

/// What open checks of every row: the file it names may be addressed by reads, the bytes lie
/// inside that file's recorded size, and a fixed row is exactly as long as the manifest says.
class RowChecker {
 public:
  RowChecker(std::span<const FieldInfo> fields, std::span<const FileInfo> files,
             const std::filesystem::path& dir)
      : m_fields(fields), m_files(files), m_index_bin((dir / "index.bin").string()) {
    for (const auto& f : fields) m_units.push_back(*detail::shape_bytes(f));  // read_manifest
  }

  IndexError bad(uint64_t sample, uint32_t field, const std::string& what) const {
    return IndexError(fmt::format("{} is corrupt: the entry of sample {}, field '{}' {}",
                                  m_index_bin, sample, m_fields[field].name, what),
                      {.file = m_index_bin});
  }

  /// `count` rows of `length` bytes at file, the last one starting at last_offset.
  void check(uint64_t sample, uint32_t field, uint32_t file, uint64_t last_offset, uint64_t length,
             uint64_t count) {
    const FieldInfo& info = m_fields[field];
    if (file >= m_files.size())
      throw bad(sample, field, fmt::format("names file {} of {}", file, m_files.size()));
    const FileInfo& f = m_files[file];
    if (f.kind == FileKind::copied)
      throw bad(sample, field, "names " + f.path + ", whose bytes were all copied into packs");
    const auto end = add(last_offset, length);
    if (!end || *end > f.size) {
      throw bad(sample, field,
                fmt::format("lies past the end of {} (offset {} + length {}, file size {})", f.path,
                            last_offset, length, f.size));
    }
    if (!info.variable && length != info.row_bytes) {
      throw bad(sample, field,
                fmt::format("holds {} bytes, but manifest.yaml gives the field row_bytes {}",
                            length, info.row_bytes));
    }
    const uint64_t unit = m_units[field];
    if (info.variable && (unit ? length % unit != 0 : length != 0)) {
      throw bad(
          sample, field,
          fmt::format("holds {} bytes, not a whole number of {}-byte elements", length, unit));
    }
    uint64_t bytes = 0;
    m_wrapped |= __builtin_mul_overflow(length, count, &bytes) ||
                 __builtin_add_overflow(m_sum, bytes, &m_sum);
  }

  /// The rows add up to the manifest's total_bytes.
  void check_total(uint64_t total_bytes, const std::filesystem::path& dir) const {
    if (!m_wrapped && m_sum == total_bytes) return;
    const auto manifest = (dir / "manifest.yaml").string();
    throw IndexError(
        fmt::format("{} does not match index.bin: total_bytes is {}, the entries hold {}", manifest,
                    total_bytes, m_wrapped ? "more than 2^64" : std::to_string(m_sum)),
        {.file = manifest});
  }

  const std::string& index_bin() const noexcept { return m_index_bin; }

 private:
  std::span<const FieldInfo> m_fields;
  std::span<const FileInfo> m_files;
  std::string m_index_bin;
  std::vector<uint64_t> m_units;
  uint64_t m_sum = 0;
  bool m_wrapped = false;
};

/// Formats 1-2: samples * fields records, sample-major; one O(n) pass.
void check_entries(std::span<const EntryRecord> entries, RowChecker& rows, uint32_t fields) {
  for (uint64_t i = 0; i < entries.size(); ++i) {
    const EntryRecord& e = entries[i];
    rows.check(i / fields, static_cast<uint32_t>(i % fields), e.file, e.offset, e.length, 1);
  }
}

/// [offset, offset + count * size) lies inside [begin, end), 8-byte aligned, without wrapping.
bool section_inside(uint64_t offset, uint64_t count, uint64_t size, uint64_t begin, uint64_t end) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) return false;
  const auto last = add(offset, bytes);
  return offset % 8 == 0 && offset >= begin && last && *last <= end;
}

/// Format 3: one field's table and everything it points at, in O(runs + blocks). The runs tile
/// [0, samples) in order, each names its blocks in turn, and its last row ends inside its file.
detail::FieldRows check_field_rows(std::span<const std::byte> bytes, const IndexHeader& h,
                                   uint32_t field, RowChecker& rows) {
  detail::FieldTable t{};
  std::memcpy(&t, bytes.data() + h.entries_offset + field * sizeof t, sizeof t);
  const uint64_t body_begin = h.entries_offset + uint64_t{h.fields} * sizeof t;
  const auto corrupt = [&](const std::string& what) {
    return IndexError(fmt::format("{} is corrupt: field {} {}", rows.index_bin(), field, what),
                      {.file = rows.index_bin()});
  };
  detail::FieldRows out;
  if (t.layout == static_cast<uint32_t>(detail::FieldLayout::entries)) {
    if (t.records != h.samples || t.blocks != 0 ||
        !section_inside(t.records_offset, t.records, sizeof(EntryRecord), body_begin,
                        h.file_table_offset)) {
      throw corrupt("has an entry table that does not fit the file or the sample count");
    }
    out.entries = reinterpret_cast<const EntryRecord*>(bytes.data() + t.records_offset);
    for (uint64_t s = 0; s < h.samples; ++s) {
      const EntryRecord& e = out.entries[s];
      rows.check(s, field, e.file, e.offset, e.length, 1);
    }
    return out;
  }
  if (t.layout != static_cast<uint32_t>(detail::FieldLayout::runs) || t.records == 0 ||
      !section_inside(t.records_offset, t.records, sizeof(RunRecord), body_begin,
                      h.file_table_offset) ||
      !section_inside(t.blocks_offset, t.blocks, sizeof(uint64_t), body_begin,
                      h.file_table_offset)) {
    throw corrupt("has a run table that does not fit the file");
  }
  out.runs = reinterpret_cast<const RunRecord*>(bytes.data() + t.records_offset);
  out.run_count = t.records;
  out.blocks = reinterpret_cast<const uint64_t*>(bytes.data() + t.blocks_offset);
  out.block_count = t.blocks;
  uint64_t next_sample = 0;
  uint64_t next_block = 0;
  for (uint64_t i = 0; i < t.records; ++i) {
    const RunRecord& r = out.runs[i];
    const auto run_end = add(r.first_sample, r.count);
    if (r.first_sample != next_sample || r.count == 0 || !run_end || *run_end > h.samples) {
      throw corrupt(fmt::format("run {} covers samples from {} ({} rows), not from {}", i,
                                r.first_sample, r.count, next_sample));
    }
    const uint64_t blocks = r.block_rows ? (r.count - 1) / r.block_rows + 1 : 0;
    if (r.block_rows == 0 || r.first_block != next_block || blocks > t.blocks - next_block) {
      throw corrupt(fmt::format("run {} names blocks the table does not hold", i));
    }
    uint64_t span = 0;
    const bool wraps = __builtin_mul_overflow(r.count - 1, r.stride, &span);
    const auto last = add(r.base, span);
    if (wraps || !last) throw rows.bad(*run_end - 1, field, "lies past the end of its file");
    rows.check(r.first_sample, field, r.file, *last, r.length, r.count);
    // Verify paths read a block into one buffer: a crafted block_rows must not size it.
    const uint64_t block_rows = std::min<uint64_t>(r.block_rows, r.count);
    if ((r.count > 1 && r.block_rows > detail::max_block_rows) ||
        (block_rows > 1 && r.length > detail::max_block_bytes / block_rows)) {
      throw corrupt(
          fmt::format("run {} has blocks of {} rows of {} bytes (at most {} rows and {} "
                      "bytes)",
                      i, r.block_rows, r.length, detail::max_block_rows, detail::max_block_bytes));
    }
    next_sample = *run_end;
    next_block += blocks;
  }
  if (next_sample != h.samples || next_block != t.blocks) {
    throw corrupt(fmt::format("has runs covering {} of {} samples and {} of {} blocks", next_sample,
                              h.samples, next_block, t.blocks));
  }
  return out;
}

}  // namespace

Index Index::open(const std::filesystem::path& dir, Holding holding) {
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
  index.m_map =
      MappedFile(dir / "index.bin", holding == Holding::copied ? MappedFile::Mode::copied
                                                               : MappedFile::Mode::read_only);
  auto bytes = index.m_map.bytes();
  auto header = check_header(bytes, dir / "index.bin");
  check_manifest_matches(manifest, header, dir);
  index.m_manifest = std::move(manifest.info);
  index.m_fields = std::move(manifest.fields);
  index.m_samples = header.samples;
  index.m_fingerprint = header.header_checksum;
  index.m_files = read_file_table(bytes, header, dir / "index.bin");
  RowChecker rows(index.m_fields, index.m_files, dir);
  if (header.version >= 3) {
    for (uint32_t f = 0; f < header.fields; ++f)
      index.m_rows.push_back(check_field_rows(bytes, header, f, rows));
  } else {
    const auto* entries =
        reinterpret_cast<const EntryRecord*>(bytes.data() + header.entries_offset);
    check_entries({entries, header.samples * header.fields}, rows, header.fields);
    for (uint32_t f = 0; f < header.fields; ++f)
      index.m_rows.push_back({.entries = entries + f, .entry_step = header.fields});
  }
  rows.check_total(index.m_manifest.total_bytes, dir);
  return index;
}

Block Index::block(uint64_t sample, uint32_t field) const noexcept {
  const detail::FieldRows& t = m_rows[field];
  if (t.entries) return {sample, 1, t.entries[sample * t.entry_step].checksum};
  const RunRecord& r = detail::run_of(t, sample);
  const uint64_t b = (sample - r.first_sample) / r.block_rows;
  const uint64_t first = r.first_sample + b * r.block_rows;
  return {first, std::min<uint64_t>(r.block_rows, r.first_sample + r.count - first),
          t.blocks[r.first_block + b]};
}

uint64_t Index::runs(uint32_t field) const noexcept {
  return m_rows[field].entries ? m_samples : m_rows[field].run_count;
}

uint64_t Index::blocks(uint32_t field) const noexcept {
  return m_rows[field].entries ? m_samples : m_rows[field].block_count;
}

Index::FieldStats Index::field_stats(uint32_t field) const noexcept {
  const detail::FieldRows& t = m_rows[field];
  FieldStats out{0, UINT64_MAX, 0};
  auto add_rows = [&out](uint64_t length, uint64_t count) {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(length, count, &bytes) ||
        __builtin_add_overflow(out.bytes, bytes, &out.bytes))
      out.bytes = UINT64_MAX;
    out.min_row = std::min(out.min_row, length);
    out.max_row = std::max(out.max_row, length);
  };
  if (t.entries) {
    for (uint64_t s = 0; s < m_samples; ++s) add_rows(t.entries[s * t.entry_step].length, 1);
  } else {
    for (uint64_t i = 0; i < t.run_count; ++i) add_rows(t.runs[i].length, t.runs[i].count);
  }
  return out;
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
