#include "ddstage/tool/index_writer.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
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
constexpr std::size_t entries_per_write = 1u << 16;
/// Within what Index::open accepts: tiny rows would otherwise make blocks of millions of rows.
uint32_t block_rows_for(uint64_t block_bytes, uint64_t row_bytes) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(
      std::min(block_bytes, detail::max_block_bytes) / std::max<uint64_t>(row_bytes, 1), 1,
      detail::max_block_rows));
}
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

/// A flatten's temporary directory beside its output: ".NAME.tmp-HOST-PID-XXXXXX". The writer's
/// host and pid are in the name from the moment it exists, so that the next flatten there can
/// tell the leftovers of a killed one from a live one's work without a race.
std::string temp_dir_template(const fs::path& out) {
  auto name = fmt::format(".{}.tmp-{}-{}-XXXXXX", out.filename().string(), host_name(), ::getpid());
  if (name.size() > NAME_MAX) name = "." + out.filename().string() + ".tmp-XXXXXX";  // never swept
  return (out.parent_path() / name).string();
}

/// Removes the temporary directories in `dir` that a flatten on this host left when it was
/// killed (its pid is gone); another host's, or one named otherwise, is not this flatten's to
/// judge. A killed flatten of a large dataset left hundreds of MB nothing removed (issue 28).
void remove_leftovers(const fs::path& dir) {
  const std::string host = "-" + host_name() + "-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto tmp = name.rfind(".tmp-");
    constexpr std::size_t suffix = 7;  // "-XXXXXX"
    if (!name.starts_with('.') || tmp == std::string::npos || name.size() < tmp + 5 + suffix)
      continue;
    const std::string owner = "-" + name.substr(tmp + 5, name.size() - suffix - (tmp + 5));
    const auto dash = owner.rfind('-');
    if (dash == std::string::npos || owner.substr(0, dash + 1) != host) continue;
    const std::string pid = owner.substr(dash + 1);
    if (pid.empty() || pid.size() > 9 ||
        !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (detail::process_alive(std::stoll(pid)) || !entry.is_directory(ec)) continue;
    std::error_code removed;
    fs::remove_all(entry.path(), removed);
    if (removed) {
      spdlog::warn("could not remove {}, left by a killed flatten: {}", entry.path().string(),
                   removed.message());
    } else {
      spdlog::info("removed {}, left by a flatten (pid {}) that was killed", entry.path().string(),
                   pid);
    }
  }
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

/// A field's runs in sample order, one-row runs included, each with its block checksums.
using RunSink = std::function<void(const detail::RunRecord&, std::span<const uint64_t>)>;

/// What a field's section of index.bin will hold.
struct FieldPlan {
  detail::FieldLayout layout = detail::FieldLayout::entries;
  uint64_t runs = 0;  // after merging
  uint64_t blocks = 0;
};

/// Collects records and hands them to `append` in pieces: a field of a billion rows needs no
/// copy of them all.
template <class Record>
class RecordBuffer {
 public:
  explicit RecordBuffer(const std::function<void(std::span<const std::byte>)>& append)
      : m_append(append) {}
  void push(const Record& r) {
    m_records.push_back(r);
    if (m_records.size() == entries_per_write) flush();
  }
  void flush() {
    m_append(std::as_bytes(std::span(m_records)));
    m_records.clear();
  }

 private:
  const std::function<void(std::span<const std::byte>)>& m_append;
  std::vector<Record> m_records;
};

struct IndexWriter::State {
  IndexWriterOptions options;
  fs::path tmp;
  bool committed = false;

  /// One field's runs: the closed ones of two rows or more (first_block counts in blocks), the
  /// one growing, and the closed one-row runs. Those go to a sparse file (an entry record at
  /// slot [sample], marked present), mapped, not to the heap: a field whose rows form no runs
  /// (files, variable rows) costs 32 bytes a row of evictable page cache, as index.bin does.
  struct FieldRuns {
    std::vector<detail::RunRecord> runs;
    std::vector<uint64_t> blocks;
    detail::RunRecord current{};
    bool open = false;
    uint64_t block_filled = 0;  // rows of current's last block hashed so far
    StreamingChecksum hash;
    MappedFile singles;  // samples EntryRecords, created at the first one-row run
    uint64_t single_count = 0;
    std::optional<uint64_t> put_twice;  // a one-row run's sample put again as one
  };

  bool defined = false;
  std::vector<FieldInfo> fields;
  uint64_t samples = 0;
  std::vector<FieldRuns> field_runs;
  uint64_t rows_put = 0;
  uint64_t total_bytes = 0;
  uint64_t expected_bytes = 0;

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

  FieldRuns& runs_of(uint64_t sample, uint32_t field, uint64_t count);
  void put(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
           std::span<const std::byte> bytes);
  FieldRuns& open_row(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
                      uint64_t length);
  void close_run(FieldRuns& f, uint32_t field);
  void hash_rows(FieldRuns& f, std::span<const std::byte> bytes, uint64_t rows);
  void count_rows(uint64_t rows, uint64_t bytes);
  void walk_field(uint32_t field, const RunSink& sink);
  void merge_field(uint32_t field, const std::function<void(const detail::RunRecord&)>& on_run,
                   const std::function<void(std::span<const uint64_t>)>& on_blocks);
  FieldPlan plan_field(uint32_t field, std::vector<bool>& referenced);
  void write_entries(uint32_t field, const std::function<void(std::span<const std::byte>)>& append);
  void write_runs(uint32_t field, const std::function<void(std::span<const std::byte>)>& append);
  void report(bool final);
  void flush_pack();
  void write_pack(std::span<const std::byte> bytes);
  void close_pack();
  void open_pack();
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
  remove_leftovers(out.parent_path());
  // A sibling, so the final rename stays on one file system and is atomic.
  std::string templ = temp_dir_template(out);
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
  m->pack_fd = FileDescriptor();
  std::error_code ec;
  fs::remove_all(m->tmp, ec);
  if (ec) spdlog::warn("could not remove {}: {}", m->tmp.string(), ec.message());
}

void IndexWriter::define(std::vector<FieldInfo> fields, uint64_t samples) {
  if (m->defined) throw std::logic_error("IndexWriter::define called twice");
  if (fields.empty()) throw UsageError("the source has no fields");
  if (samples == 0) throw UsageError("the source has no samples");
  // A format that described a field inconsistently would publish an index no reader opens.
  for (const auto& f : fields) detail::check_field(f, m->options.out / "manifest.yaml");
  m->fields = std::move(fields);
  m->samples = samples;
  m->field_runs.resize(m->fields.size());
  m->defined = true;
}

void IndexWriter::expect_bytes(uint64_t total) {
  m->expected_bytes = total;
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

IndexWriter::State::FieldRuns& IndexWriter::State::runs_of(uint64_t sample, uint32_t field,
                                                           uint64_t count) {
  if (!defined) throw std::logic_error("IndexWriter: put before define");
  if (field >= fields.size() || sample >= samples || count > samples - sample) {
    throw std::logic_error("IndexWriter: entry (" + std::to_string(sample) + ", " +
                           std::to_string(field) + ") out of range");
  }
  return field_runs[field];
}

/// Records the row and hashes it into the run's last block.
void IndexWriter::State::put(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
                             std::span<const std::byte> bytes) {
  hash_rows(open_row(sample, field, file, offset, bytes.size()), bytes, 1);
}

/// Extends the field's run when (sample, offset) continues it, else starts a new one.
IndexWriter::State::FieldRuns& IndexWriter::State::open_row(uint64_t sample, uint32_t field,
                                                            uint32_t file, uint64_t offset,
                                                            uint64_t length) {
  FieldRuns& f = runs_of(sample, field, 1);
  detail::RunRecord& r = f.current;
  const bool continues = f.open && sample == r.first_sample + r.count && file == r.file &&
                         length == r.length &&
                         (r.count == 1 ? offset >= r.base : offset == r.base + r.count * r.stride);
  if (continues) {
    if (r.count == 1) r.stride = offset - r.base;
    ++r.count;
  } else {
    close_run(f, field);
    r = {sample, 1,
         offset, 0,
         length, f.blocks.size(),
         file,   block_rows_for(options.block_bytes, length)};
    f.open = true;
  }
  return f;
}

/// Hashes rows (back to back in bytes, the run's last ones, not filling more than its current
/// block) and closes the block when full.
void IndexWriter::State::hash_rows(FieldRuns& f, std::span<const std::byte> bytes, uint64_t rows) {
  if (f.current.block_rows == 1) {
    f.blocks.push_back(checksum(bytes));  // one-shot: the same value, cheaper for one row
  } else {
    f.hash.update(bytes);
    f.block_filled += rows;
    if (f.block_filled == f.current.block_rows) {
      f.blocks.push_back(f.hash.digest_and_reset());
      f.block_filled = 0;
    }
  }
  count_rows(rows, bytes.size());
}

void IndexWriter::State::count_rows(uint64_t rows, uint64_t bytes) {
  rows_put += rows;
  total_bytes += bytes;
  report(false);
}

void IndexWriter::State::close_run(FieldRuns& f, uint32_t field) {
  if (!f.open) return;
  if (f.block_filled) {
    f.blocks.push_back(f.hash.digest_and_reset());
    f.block_filled = 0;
  }
  f.open = false;
  const detail::RunRecord& r = f.current;
  if (r.count > 1) {
    f.runs.push_back(r);
    return;
  }
  if (f.singles.bytes().empty()) {
    // Sparse (no fallocate): pages exist only where rows land. Unlinked once mapped, so the
    // published directory never holds it and a failed flatten leaves nothing behind.
    const auto path = tmp / ("singles-" + std::to_string(field) + ".bin");
    auto fd = FileDescriptor::open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (::ftruncate(fd.get(), static_cast<off_t>(samples * sizeof(detail::EntryRecord))) != 0)
      throw IoError("ftruncate " + path.string(), errno);
    f.singles = MappedFile(path, MappedFile::Mode::read_write);
    fs::remove(path);
  }
  auto* slot = reinterpret_cast<detail::EntryRecord*>(f.singles.writable().data()) + r.first_sample;
  if (slot->reserved) {
    if (!f.put_twice) f.put_twice = r.first_sample;
  } else {
    *slot = {r.file, 1, r.base, r.length, f.blocks.back()};
    ++f.single_count;
  }
  f.blocks.pop_back();
}

void IndexWriter::put_in_place(uint64_t sample, uint32_t field, uint32_t file, uint64_t offset,
                               std::span<const std::byte> bytes) {
  m->put(sample, field, file, offset, bytes);
}

void IndexWriter::put_rows_in_place(uint32_t field, uint64_t first_sample, uint64_t count,
                                    uint32_t file, uint64_t offset, uint64_t stride,
                                    uint64_t row_bytes, std::span<const std::byte> rows) {
  State::FieldRuns& f = m->runs_of(first_sample, field, count);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, row_bytes, &bytes) || bytes != rows.size()) {
    throw std::logic_error("IndexWriter::put_rows_in_place: " + std::to_string(rows.size()) +
                           " bytes are not " + std::to_string(count) + " rows of " +
                           std::to_string(row_bytes));
  }
  for (uint64_t i = 0; i < count;) {
    // The first row decides whether the run continues (and fixes its stride if it was one row
    // long); the rest of the block then goes in one piece when the run's stride is ours.
    m->put(first_sample + i, field, file, offset + i * stride,
           rows.subspan(i * row_bytes, row_bytes));
    ++i;
    auto& r = f.current;
    if (r.count < 2 || r.stride != stride || r.block_rows == 1) continue;
    const uint64_t n = std::min(count - i, r.block_rows - f.block_filled);
    if (n == 0) continue;
    r.count += n;
    m->hash_rows(f, rows.subspan(i * row_bytes, n * row_bytes), n);
    i += n;
  }
}

void IndexWriter::put_packed(uint64_t sample, uint32_t field, std::span<const std::byte> bytes) {
  m->runs_of(sample, field, 1);  // refuses a bad entry before a byte is packed
  if (m->pack_fd && m->pack_size > 0 && m->pack_size + bytes.size() > m->options.pack_bytes)
    m->close_pack();
  if (!m->pack_fd) m->open_pack();
  m->put(sample, field, m->pack_file, m->pack_size, bytes);
  if (m->pack_buffer.size() + bytes.size() > pack_buffer_bytes) m->flush_pack();
  if (bytes.size() >= pack_buffer_bytes) {
    m->write_pack(bytes);
  } else {
    m->pack_buffer.insert(m->pack_buffer.end(), bytes.begin(), bytes.end());
  }
  m->pack_size += bytes.size();
  m->packed_bytes += bytes.size();
}

void IndexWriter::put_packed_pieces(uint64_t sample, uint32_t field, uint64_t length,
                                    uint64_t piece_bytes,
                                    const std::function<void(std::span<std::byte>)>& fill) {
  const uint64_t piece = std::max<uint64_t>(1, std::min(piece_bytes, length));
  if (block_rows_for(m->options.block_bytes, length) != 1 || piece == length) {
    // A row that shares its checksum block with others is small (a block is ~256 KiB): whole.
    std::vector<std::byte> row(length);
    for (uint64_t done = 0; done < length; done += piece)
      fill(std::span(row).subspan(done, std::min(piece, length - done)));
    return put_packed(sample, field, row);
  }
  m->runs_of(sample, field, 1);  // refuses a bad entry before a byte is packed
  if (m->pack_fd && m->pack_size > 0 && m->pack_size + length > m->options.pack_bytes)
    m->close_pack();
  if (!m->pack_fd) m->open_pack();
  m->flush_pack();  // the pieces go straight to the file, after what is buffered
  // The row is its own block: its checksum is the streamed hash of its pieces, the value a
  // one-shot hash of the whole row gives.
  StreamingChecksum hash;
  std::vector<std::byte> buffer(piece);
  for (uint64_t done = 0; done < length;) {
    const auto bytes = std::span(buffer).first(std::min(piece, length - done));
    fill(bytes);
    hash.update(bytes);
    m->write_pack(bytes);
    done += bytes.size();
  }
  m->open_row(sample, field, m->pack_file, m->pack_size, length)
      .blocks.push_back(hash.digest_and_reset());
  m->count_rows(1, length);
  m->pack_size += length;
  m->packed_bytes += length;
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
  options.progress({.items_done = rows_put,
                    .total_items = samples * fields.size(),
                    .bytes_done = total_bytes,
                    .seconds = std::chrono::duration<double>(now - start).count(),
                    .final = final,
                    .samples_done = rows_put / fields.size(),
                    .total_samples = samples,
                    .total_bytes = final ? total_bytes : expected_bytes});
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

/// Calls sink with the field's runs in sample order, the one-row ones read back from their
/// file, after closing its open run. logic_error unless they cover every sample exactly once.
void IndexWriter::State::walk_field(uint32_t field, const RunSink& sink) {
  FieldRuns& f = field_runs[field];
  close_run(f, field);
  auto& runs = f.runs;
  std::sort(runs.begin(), runs.end(),
            [](const auto& a, const auto& b) { return a.first_sample < b.first_sample; });
  const auto* singles = reinterpret_cast<const detail::EntryRecord*>(f.singles.bytes().data());
  uint64_t next = 0;
  uint64_t singles_seen = 0;
  uint64_t missing = 0;
  auto take_singles = [&](uint64_t end) {
    for (; next < end; ++next) {
      const detail::EntryRecord* e = singles ? singles + next : nullptr;
      if (!e || !e->reserved) {
        ++missing;
        continue;
      }
      ++singles_seen;
      const detail::RunRecord r{
          next,      1, e->offset, 0,
          e->length, 0, e->file,   block_rows_for(options.block_bytes, e->length)};
      sink(r, std::span(&e->checksum, 1));
    }
  };
  for (const auto& r : runs) {
    if (r.first_sample < next) {
      throw std::logic_error("IndexWriter: entry for sample " + std::to_string(r.first_sample) +
                             " of field '" + fields[field].name + "' put twice");
    }
    take_singles(r.first_sample);
    sink(r, std::span(f.blocks).subspan(r.first_block, (r.count - 1) / r.block_rows + 1));
    next = r.first_sample + r.count;
  }
  take_singles(samples);
  if (!f.put_twice && singles_seen != f.single_count) {
    // A one-row run inside a longer one: find it (only on this error path, O(samples)).
    for (const auto& r : runs) {
      for (uint64_t s = r.first_sample; s < r.first_sample + r.count && !f.put_twice; ++s)
        if (singles[s].reserved) f.put_twice = s;
    }
  }
  if (f.put_twice) {
    throw std::logic_error("IndexWriter: entry for sample " + std::to_string(*f.put_twice) +
                           " of field '" + fields[field].name + "' put twice");
  }
  if (missing) {
    throw std::logic_error("IndexWriter::commit: " + std::to_string(missing) +
                           " entries of field '" + fields[field].name + "' were never put");
  }
}

/// The field's runs as index.bin stores them: neighbours that continue each other merged. Blocks
/// keep their order, so they go to on_blocks as they come.
void IndexWriter::State::merge_field(
    uint32_t field, const std::function<void(const detail::RunRecord&)>& on_run,
    const std::function<void(std::span<const uint64_t>)>& on_blocks) {
  std::optional<detail::RunRecord> p;
  uint64_t blocks = 0;
  walk_field(field, [&](const detail::RunRecord& r, std::span<const uint64_t> b) {
    if (on_blocks) on_blocks(b);
    const uint64_t first_block = blocks;
    blocks += b.size();
    if (p) {
      // Merged only where the blocks line up: a block's checksum cannot be split or joined.
      const uint64_t stride = p->count == 1 ? r.base - p->base : p->stride;
      if (r.file == p->file && r.length == p->length && r.block_rows == p->block_rows &&
          p->count % p->block_rows == 0 && r.base >= p->base &&
          r.base == p->base + p->count * stride && (r.count == 1 || r.stride == stride)) {
        p->stride = stride;
        p->count += r.count;
        return;
      }
      on_run(*p);
    }
    p = r;
    p->first_block = first_block;
  });
  on_run(*p);
}

/// Counts the field's merged runs and blocks and picks the smaller layout: runs (56 bytes each
/// and 8 a block) or an entry of 32 bytes a row. Marks the files its rows lie in.
FieldPlan IndexWriter::State::plan_field(uint32_t field, std::vector<bool>& referenced) {
  FieldPlan plan;
  merge_field(
      field,
      [&](const detail::RunRecord& r) {
        ++plan.runs;
        referenced[r.file] = true;
      },
      [&](std::span<const uint64_t> b) { plan.blocks += b.size(); });
  const uint64_t runs_bytes =
      plan.runs * sizeof(detail::RunRecord) + plan.blocks * sizeof(uint64_t);
  plan.layout = samples * sizeof(detail::EntryRecord) < runs_bytes ? detail::FieldLayout::entries
                                                                   : detail::FieldLayout::runs;
  return plan;
}

/// An entry per row. Rows of longer runs need a checksum of their own: their blocks' when a
/// block is one row, else hashed again from their file (such rows are under a block's size).
void IndexWriter::State::write_entries(
    uint32_t field, const std::function<void(std::span<const std::byte>)>& append) {
  RecordBuffer<detail::EntryRecord> out(append);
  FileDescriptor fd;
  uint32_t fd_file = 0;
  std::vector<std::byte> row;
  walk_field(field, [&](const detail::RunRecord& r, std::span<const uint64_t> blocks) {
    for (uint64_t i = 0; i < r.count; ++i) {
      const uint64_t offset = r.base + i * r.stride;
      uint64_t sum = 0;
      if (r.count == 1 || r.block_rows == 1) {
        sum = blocks[i];
      } else {
        if (!fd || fd_file != r.file) {
          const auto& info = files[r.file];
          fd = FileDescriptor::open(
              info.kind == FileKind::pack ? tmp / info.path : fs::path(info.path), O_RDONLY);
          fd_file = r.file;
        }
        row.resize(r.length);
        fd.pread_exact(row, offset);
        sum = checksum(row);
      }
      out.push({r.file, 0, offset, r.length, sum});
    }
  });
  out.flush();
}

void IndexWriter::State::write_runs(uint32_t field,
                                    const std::function<void(std::span<const std::byte>)>& append) {
  RecordBuffer<detail::RunRecord> runs(append);
  merge_field(field, [&](const detail::RunRecord& r) { runs.push(r); }, {});
  runs.flush();
  RecordBuffer<uint64_t> blocks(append);
  merge_field(
      field, [](const detail::RunRecord&) {},
      [&](std::span<const uint64_t> b) {
        for (uint64_t c : b) blocks.push(c);
      });
  blocks.flush();
}

/// Writes index.bin: field tables, each field's runs (or, when every row is a run of its own,
/// plain entry records) and block checksums, the file table and names, then the header with
/// both checksums. Sources no row points into had every byte copied into packs: marked so
/// staleness checks skip them.
void IndexWriter::State::write_tables() {
  const fs::path root = common_root(source_paths);
  auto path = tmp / "index.bin";
  auto fd = FileDescriptor::open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  StreamingChecksum body;
  uint64_t at = detail::entries_offset;
  auto append = [&](std::span<const std::byte> bytes) {
    fd.pwrite_all(bytes, at);
    body.update(bytes);
    at += bytes.size();
  };

  // Sections follow the field tables in field order, so their offsets are known once each
  // field is counted; the tables are written first, then the fields one at a time.
  std::vector<bool> referenced(files.size(), false);
  std::vector<detail::FieldTable> tables(fields.size());
  uint64_t offset = detail::entries_offset + fields.size() * sizeof(detail::FieldTable);
  for (uint32_t f = 0; f < fields.size(); ++f) {
    const FieldPlan plan = plan_field(f, referenced);
    auto& t = tables[f];
    if (plan.layout == detail::FieldLayout::entries) {
      t = {static_cast<uint32_t>(detail::FieldLayout::entries), 0, offset, samples, 0, 0};
      offset += samples * sizeof(detail::EntryRecord);
    } else {
      t = {static_cast<uint32_t>(detail::FieldLayout::runs), 0, offset, plan.runs, 0, plan.blocks};
      offset += plan.runs * sizeof(detail::RunRecord);
      t.blocks_offset = offset;
      offset += plan.blocks * sizeof(uint64_t);
    }
  }
  append(std::as_bytes(std::span(tables)));
  const std::function<void(std::span<const std::byte>)> append_fn = append;
  for (uint32_t f = 0; f < fields.size(); ++f) {
    if (tables[f].layout == static_cast<uint32_t>(detail::FieldLayout::entries)) {
      write_entries(f, append_fn);
    } else {
      write_runs(f, append_fn);
    }
    if (at != (f + 1 < fields.size() ? tables[f + 1].records_offset : offset))
      throw std::logic_error("IndexWriter: field " + fields[f].name +
                             " wrote a section of the wrong size");
    auto& fr = field_runs[f];
    fr.runs = {};
    fr.blocks = {};
    fr.singles = MappedFile();
  }

  for (uint32_t f = 0; f < files.size(); ++f) {
    if (files[f].kind == FileKind::source && !referenced[f]) files[f].kind = FileKind::copied;
  }
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
  h.file_table_offset = at;
  append(std::as_bytes(std::span(records)));
  h.names_offset = at;
  append(std::as_bytes(std::span(names)));
  h.file_bytes = at;
  h.fields_checksum = detail::fields_checksum(fields);
  h.body_checksum = body.digest_and_reset();
  h.header_checksum = XXH3_64bits(&h, sizeof h);  // computed while the field is still zero
  fd.pwrite_all(std::as_bytes(std::span(&h, 1)), 0);
  fd.sync();
  fd.close();

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
  if (!m->defined) throw std::logic_error("IndexWriter::commit before define");
  if (m->pack_fd) m->close_pack();
  m->write_tables();
  m->publish();
  m->report(true);
}

}  // namespace ddstage
