#include "ddstage/tool/index_writer.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/mapped_file.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "index_layout.hpp"
#include "manifest.hpp"
#include "process.hpp"

namespace ddstage {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t pack_buffer_bytes = 4u << 20;
constexpr auto progress_interval = std::chrono::milliseconds(200);

int64_t mtime_ns(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
}

/// Longest common directory of the source paths: the root they are recorded relative to.
fs::path common_root(const std::vector<fs::path>& paths) {
  if (paths.empty()) return {};
  fs::path root = paths.front().parent_path();
  for (const auto& p : paths) {
    while (!root.empty() &&
           std::mismatch(root.begin(), root.end(), p.begin(), p.end()).first != root.end()) {
      root = root.parent_path();
    }
  }
  return root;
}

void sync_directory(const fs::path& dir) {
  FileDescriptor::open(dir, O_RDONLY | O_DIRECTORY).sync();
}

/// True if `out` holds an index (or nothing) and may be replaced under --force.
bool replaceable(const fs::path& out) {
  std::error_code ec;
  if (!fs::is_directory(out, ec)) return false;
  return fs::exists(out / "manifest.yaml", ec) || fs::is_empty(out, ec);
}

}  // namespace

struct IndexWriter::State {
  IndexWriterOptions options;
  fs::path tmp;
  bool committed = false;

  std::vector<FieldInfo> fields;
  uint64_t samples = 0;
  FileDescriptor index_fd;
  MappedFile entry_map;
  Entry* entries = nullptr;
  std::vector<bool> entry_set;
  uint64_t entries_put = 0;
  uint64_t total_bytes = 0;

  std::vector<fs::path> source_paths;  // absolute, for file ids < source_paths.size()
  std::vector<FileInfo> files;         // sources and packs, in file-id order
  std::unordered_map<std::string, uint32_t> source_ids;

  std::string format;
  std::map<std::string, std::string> attributes;

  FileDescriptor pack_fd;
  uint32_t pack_count = 0;
  uint32_t pack_file = 0;
  uint64_t pack_size = 0;     // bytes of the current pack, buffered ones included
  uint64_t pack_on_disk = 0;  // bytes of the current pack handed to the kernel
  uint64_t packed_bytes = 0;
  std::vector<std::byte> pack_buffer;

  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_progress = start;

  Entry& slot(uint64_t sample, uint32_t field);
  void report(bool final);
  void flush_pack();
  void write_pack(std::span<const std::byte> bytes);
  void close_pack();
  void open_pack();
  void mark_copied_sources();
  void write_tables();
  void publish();
};

IndexWriter::IndexWriter(IndexWriterOptions options) : m(std::make_unique<State>()) {
  m->options = std::move(options);
  auto& out = m->options.out;
  out = fs::absolute(out).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!m->options.force)
      throw UsageError(out.string() + " already exists; pass --force to replace it");
    if (!replaceable(out)) {
      throw UsageError(out.string() + " exists and is not a ddstage index; refusing to replace it");
    }
  }
  if (!fs::is_directory(out.parent_path(), ec)) {
    throw UsageError("output directory " + out.parent_path().string() + " does not exist");
  }
  if (m->options.name.empty()) m->options.name = out.stem().string();
  // A sibling, so the final rename stays on one file system and is atomic.
  std::string templ =
      (out.parent_path() / ("." + out.filename().string() + ".tmp-XXXXXX")).string();
  if (!::mkdtemp(templ.data()))
    throw IoError("cannot create a temporary directory next to " + out.string(), errno);
  m->tmp = templ;
  // mkdtemp makes it 0700; the published index should be as readable as its files (umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::chmod(templ.c_str(), 0777 & ~mask) != 0) {
    const int err = errno;
    ::rmdir(templ.c_str());  // the destructor, which removes it otherwise, does not run for a
                             // throwing constructor
    throw IoError("chmod " + templ, err);
  }
}

IndexWriter::~IndexWriter() {
  if (!m || m->committed) return;
  m->entry_map = MappedFile();
  m->index_fd = FileDescriptor();
  m->pack_fd = FileDescriptor();
  std::error_code ec;
  fs::remove_all(m->tmp, ec);
  if (ec) spdlog::warn("could not remove {}: {}", m->tmp.string(), ec.message());
}

void IndexWriter::define(std::vector<FieldInfo> fields, uint64_t samples) {
  if (m->entries) throw std::logic_error("IndexWriter::define called twice");
  if (fields.empty()) throw UsageError("the source has no fields");
  if (samples == 0) throw UsageError("the source has no samples");
  // A format that described a field inconsistently would publish an index no reader opens.
  for (const auto& f : fields) detail::check_field(f, m->options.out / "manifest.yaml");
  m->fields = std::move(fields);
  m->samples = samples;
  const uint64_t n = samples * m->fields.size();
  const uint64_t table_end = detail::entries_offset + n * sizeof(Entry);
  auto path = m->tmp / "index.bin";
  m->index_fd = FileDescriptor::open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
  // Reserve real blocks now: a full disk then fails here with ENOSPC instead of a SIGBUS
  // when a page of the mapping is first written.
  if (int rc = ::posix_fallocate(m->index_fd.get(), 0, static_cast<off_t>(table_end)); rc != 0) {
    throw IoError("cannot allocate " + std::to_string(table_end) + " bytes for " + path.string(),
                  rc);
  }
  m->entry_map = MappedFile(path, MappedFile::Mode::read_write);
  m->entries = reinterpret_cast<Entry*>(m->entry_map.writable().data() + detail::entries_offset);
  m->entry_set.assign(n, false);
}

uint32_t IndexWriter::add_source(const fs::path& path) {
  auto abs = fs::absolute(path).lexically_normal();
  auto [it, inserted] =
      m->source_ids.try_emplace(abs.string(), static_cast<uint32_t>(m->files.size()));
  if (!inserted) return it->second;
  struct stat st {};
  if (::stat(abs.c_str(), &st) != 0)
    throw IoError("cannot stat " + abs.string(), errno, {.file = abs.string()});
  m->files.push_back(
      {abs.string(), FileKind::source, static_cast<uint64_t>(st.st_size), mtime_ns(st)});
  m->source_paths.push_back(abs);
  return it->second;
}

Entry& IndexWriter::State::slot(uint64_t sample, uint32_t field) {
  if (!entries) throw std::logic_error("IndexWriter: put before define");
  if (sample >= samples || field >= fields.size()) {
    throw std::logic_error("IndexWriter: entry (" + std::to_string(sample) + ", " +
                           std::to_string(field) + ") out of range");
  }
  const uint64_t i = sample * fields.size() + field;
  if (entry_set[i])
    throw std::logic_error("IndexWriter: entry for sample " + std::to_string(sample) +
                           " put twice");
  entry_set[i] = true;
  ++entries_put;
  return entries[i];
}

void IndexWriter::put_in_place(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
                               std::span<const std::byte> bytes) {
  Entry& e = m->slot(sample, field);
  e = {file, 0, offset, bytes.size(), checksum(bytes)};
  m->total_bytes += bytes.size();
  m->report(false);
}

void IndexWriter::put_packed(uint64_t sample, uint32_t field, std::span<const std::byte> bytes) {
  Entry& e = m->slot(sample, field);
  if (m->pack_fd && m->pack_size > 0 && m->pack_size + bytes.size() > m->options.pack_bytes)
    m->close_pack();
  if (!m->pack_fd) m->open_pack();
  e = {m->pack_file, 0, m->pack_size, bytes.size(), checksum(bytes)};
  if (m->pack_buffer.size() + bytes.size() > pack_buffer_bytes) m->flush_pack();
  if (bytes.size() >= pack_buffer_bytes) {
    m->write_pack(bytes);
  } else {
    m->pack_buffer.insert(m->pack_buffer.end(), bytes.begin(), bytes.end());
  }
  m->pack_size += bytes.size();
  m->packed_bytes += bytes.size();
  m->total_bytes += bytes.size();
  m->report(false);
}

void IndexWriter::set_format(const std::string& name) {
  m->format = name;
}

void IndexWriter::set_attribute(const std::string& key, const std::string& value) {
  m->attributes[key] = value;
}

bool IndexWriter::is_own_path(const fs::path& path) const {
  const auto p = fs::absolute(path).lexically_normal();
  auto inside = [&p](const fs::path& dir) {
    return std::mismatch(dir.begin(), dir.end(), p.begin(), p.end()).first == dir.end();
  };
  return inside(m->options.out) || inside(m->tmp);
}

uint64_t IndexWriter::bytes_written() const noexcept {
  return m->total_bytes;
}
uint64_t IndexWriter::packed_bytes() const noexcept {
  return m->packed_bytes;
}

void IndexWriter::State::report(bool final) {
  if (!options.progress) return;
  auto now = std::chrono::steady_clock::now();
  if (!final && now - last_progress < progress_interval) return;
  last_progress = now;
  options.progress({entries_put, samples * fields.size(), total_bytes,
                    std::chrono::duration<double>(now - start).count(), final});
}

void IndexWriter::State::open_pack() {
  char name[32];
  std::snprintf(name, sizeof name, "pack-%05u.bin", pack_count++);
  pack_fd = FileDescriptor::open(tmp / name, O_WRONLY | O_CREAT | O_EXCL, 0644);
  pack_file = static_cast<uint32_t>(files.size());
  files.push_back({name, FileKind::pack, 0, 0});
  pack_size = 0;
  pack_on_disk = 0;
  pack_buffer.reserve(pack_buffer_bytes);
}

void IndexWriter::State::flush_pack() {
  write_pack(pack_buffer);
  pack_buffer.clear();
}

void IndexWriter::State::write_pack(std::span<const std::byte> bytes) {
  pack_fd.write_all(bytes);
  // Start writeback now (advisory, so the result is ignored): writing the pack then overlaps
  // reading the origin, and the fsync at commit has little left to wait for.
  ::sync_file_range(pack_fd.get(), static_cast<off_t>(pack_on_disk),
                    static_cast<off_t>(bytes.size()), SYNC_FILE_RANGE_WRITE);
  pack_on_disk += bytes.size();
}

void IndexWriter::State::close_pack() {
  flush_pack();
  pack_fd.sync();
  struct stat st {};
  if (::fstat(pack_fd.get(), &st) != 0) throw IoError("fstat " + pack_fd.path().string(), errno);
  files[pack_file].size = static_cast<uint64_t>(st.st_size);
  files[pack_file].mtime_ns = mtime_ns(st);
  pack_fd = FileDescriptor();
}

/// Sources no entry points into had every byte copied into packs: mark them so staleness
/// checks skip them.
void IndexWriter::State::mark_copied_sources() {
  std::vector<bool> referenced(files.size(), false);
  const uint64_t n = samples * fields.size();
  for (uint64_t i = 0; i < n; ++i) referenced[entries[i].file] = true;
  for (uint32_t f = 0; f < files.size(); ++f) {
    if (files[f].kind == FileKind::source && !referenced[f]) files[f].kind = FileKind::copied;
  }
}

/// Appends the file table and names, then the header with both checksums.
void IndexWriter::State::write_tables() {
  const fs::path root = common_root(source_paths);
  mark_copied_sources();
  std::vector<detail::FileRecord> records;
  std::string names;
  for (auto& f : files) {
    if (f.kind != FileKind::pack) f.path = fs::path(f.path).lexically_relative(root).string();
    records.push_back({names.size(), static_cast<uint32_t>(f.path.size()),
                       static_cast<uint32_t>(f.kind), f.size, f.mtime_ns});
    names += f.path;
  }
  names.resize((names.size() + 7) / 8 * 8, '\0');

  detail::IndexHeader h{};
  std::memcpy(h.magic, detail::index_magic, sizeof h.magic);
  h.version = index_format_version;
  h.header_bytes = sizeof h;
  h.samples = samples;
  h.fields = static_cast<uint32_t>(fields.size());
  h.files = static_cast<uint32_t>(files.size());
  h.entries_offset = detail::entries_offset;
  h.file_table_offset = h.entries_offset + samples * fields.size() * sizeof(Entry);
  h.names_offset = h.file_table_offset + records.size() * sizeof(detail::FileRecord);
  h.file_bytes = h.names_offset + names.size();
  h.fields_checksum = detail::fields_checksum(fields);

  auto table = std::as_bytes(std::span(records));
  auto name_bytes = std::as_bytes(std::span(names));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto body = entry_map.bytes().subspan(h.entries_offset, h.file_table_offset - h.entries_offset);
  XXH3_64bits_update(st, body.data(), body.size());
  XXH3_64bits_update(st, table.data(), table.size());
  XXH3_64bits_update(st, name_bytes.data(), name_bytes.size());
  h.body_checksum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  h.header_checksum = XXH3_64bits(&h, sizeof h);  // computed while the field is still zero

  entry_map.flush();
  entry_map = MappedFile();
  index_fd.pwrite_all(table, h.file_table_offset);
  index_fd.pwrite_all(name_bytes, h.names_offset);
  index_fd.pwrite_all(std::as_bytes(std::span(&h, 1)), 0);
  index_fd.sync();
  index_fd = FileDescriptor();

  detail::Manifest manifest;
  manifest.info = {options.name,      format,      root,      DDSTAGE_VERSION,
                   detail::utc_now(), total_bytes, attributes};
  manifest.samples = samples;
  manifest.fields = fields;
  detail::write_manifest(tmp / "manifest.yaml", manifest, files);
}

void IndexWriter::State::publish() {
  const auto& out = options.out;
  sync_directory(tmp);
  std::error_code ec;
  if (fs::exists(out, ec)) {
    // Swap in one step: readers see the old index or the new one, never neither.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0) {
      throw IoError("cannot replace " + out.string(), errno, {.file = out.string()});
    }
    committed = true;
    fs::remove_all(tmp, ec);
    if (ec) spdlog::warn("could not remove the old index at {}: {}", tmp.string(), ec.message());
  } else {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0) {
      throw IoError("cannot create " + out.string(), errno, {.file = out.string()});
    }
    committed = true;
  }
  sync_directory(out.parent_path());
}

void IndexWriter::commit() {
  if (!m->entries) throw std::logic_error("IndexWriter::commit before define");
  if (m->entries_put != m->entry_set.size()) {
    throw std::logic_error(
        "IndexWriter::commit: " + std::to_string(m->entry_set.size() - m->entries_put) +
        " entries were never put");
  }
  if (m->pack_fd) m->close_pack();
  m->write_tables();
  m->publish();
  m->report(true);
}

}  // namespace ddstage
