#include "ddstage/tool/shard_loader.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ddstage/error.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/origin_reader.hpp"

namespace ddstage {
namespace {

/// Entries handed to one read_entries call: bounds the request list, not the I/O size.
constexpr std::size_t entries_per_chunk = 1u << 16;

/// Samples [first, last) of the shard and their entry bytes: what a stream takes at a time.
struct Chunk {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t bytes = 0;
};

/// Contiguous sample ranges of about chunk_bytes each: a stream reading one chunk reads long
/// stretches of each file (rows of one field sit together), and many chunks let fast streams
/// take over the work of slow ones.
std::vector<Chunk> plan_chunks(const Index& index, ShardRange range, uint64_t chunk_bytes) {
  const std::size_t fields = index.fields().size();
  std::vector<Chunk> chunks;
  Chunk c{range.first, range.first, 0};
  for (uint64_t s = range.first; s < range.last; ++s) {
    for (uint32_t f = 0; f < fields; ++f) c.bytes += index.entry(s, f).length;
    c.last = s + 1;
    if (c.bytes >= chunk_bytes || (c.last - c.first) * fields >= entries_per_chunk) {
      chunks.push_back(c);
      c = {c.last, c.last, 0};
    }
  }
  if (c.last > c.first) chunks.push_back(c);
  return chunks;
}

/// What the streams of one fill_shard share: the next chunk to take, the progress so far and
/// the first error.
class StreamQueue {
 public:
  StreamQueue(std::vector<Chunk> chunks, const ShardLoadOptions& options)
      : m_chunks(std::move(chunks)), m_options(options) {
    for (const auto& c : m_chunks) m_total += c.bytes;
  }

  std::size_t chunks() const noexcept { return m_chunks.size(); }
  /// The next chunk to read, or nullptr once all are taken or a stream failed.
  const Chunk* take() {
    if (m_failed.load(std::memory_order_relaxed)) return nullptr;
    const std::size_t i = m_next.fetch_add(1, std::memory_order_relaxed);
    return i < m_chunks.size() ? &m_chunks[i] : nullptr;
  }
  void done(const Chunk& c) {
    std::lock_guard lock(m_mutex);
    m_done += c.bytes;
    if (m_options.progress) m_options.progress(m_done, m_total);
  }
  /// Keeps the first error only: later ones are usually the other streams noticing the same
  /// broken file, and the first names the cause.
  void fail(std::exception_ptr error) {
    std::lock_guard lock(m_mutex);
    if (!m_error) m_error = std::move(error);
    m_failed = true;
  }
  void rethrow_failure() const {
    if (m_error) std::rethrow_exception(m_error);
  }

 private:
  std::vector<Chunk> m_chunks;
  const ShardLoadOptions& m_options;
  std::atomic<std::size_t> m_next{0};
  std::atomic<bool> m_failed{false};
  std::mutex m_mutex;
  std::exception_ptr m_error;
  uint64_t m_done = 0;
  uint64_t m_total = 0;
};

/// Once a chunk of a tier file is loaded (or verified), its pages leave this process's mapping
/// and their writeback starts (ShmSegment::release_pages). Rows that reach the file through the
/// mapping (short runs, rows gathered from the scratch buffer, the verify pass reading them
/// back) would otherwise stay mapped: a rank filling a file three times the node's memory grew
/// to the whole file's size (RssFile). A plain pwrite of each chunk would do the same without
/// the faults, but would give up the splice from origin (one copy, not two) for runs that need
/// no gathering.
void release_chunk(const Index& index, const ShardLayout& layout, const ShmSegment& tier_file,
                   const Chunk& c) {
  for (uint32_t f = 0; f < index.fields().size(); ++f) {
    const uint64_t begin = layout.row_offset(c.first, f);
    const uint64_t end = layout.row_offset(c.last - 1, f) + index.entry(c.last - 1, f).length;
    if (end > begin) tier_file.release_pages(begin, end - begin);
  }
}

/// One stream: its own OriginReader (open files, scratch buffer), so streams share no lock
/// while reading. Loads its chunks, or (verify pass) checks them.
void run_stream(const Index& index, const ShardLayout& layout, DestinationFile destination,
                std::span<std::byte> region, const ShmSegment* tier_file,
                const ShardLoadOptions& options, StreamQueue& queue, bool verify_pass) noexcept {
  try {
    // Streams share the process's open-file limit: each caches its share of a single reader's.
    const std::size_t max_open =
        std::clamp<std::size_t>(open_file_limit() / 4 / options.streams, 1, 1024);
    OriginReader reader(index, {.allow_stale = options.allow_stale,
                                .max_open_files = max_open,
                                .destination = verify_pass ? DestinationFile{} : destination});
    const auto fields = static_cast<uint32_t>(index.fields().size());
    std::vector<EntryRead> reads;
    std::vector<std::byte> bytes;
    while (const Chunk* c = queue.take()) {
      if (verify_pass) {
        verify_shard_rows(index, layout, region.data(), {c->first, c->last}, reader, bytes);
      } else {
        reads.clear();
        // Sample-major: the fields of one sample often sit together in the file.
        for (uint64_t s = c->first; s < c->last; ++s) {
          for (uint32_t f = 0; f < fields; ++f)
            reads.push_back({s, f, region.data() + layout.row_offset(s, f)});
        }
        reader.read_entries(reads);
        queue.done(*c);
      }
      if (tier_file) release_chunk(index, layout, *tier_file, *c);
    }
  } catch (...) {
    queue.fail(std::current_exception());
  }
}

/// Runs the streams over queue's chunks: the caller's thread is one of them.
void run_streams(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                 DestinationFile destination, const ShmSegment* tier_file,
                 const ShardLoadOptions& options, StreamQueue& queue, bool verify_pass) {
  const auto streams = std::min<std::size_t>(options.streams, queue.chunks());
  {
    std::vector<std::jthread> others;
    try {
      for (std::size_t i = 1; i < streams; ++i) {
        others.emplace_back(run_stream, std::cref(index), std::cref(layout), destination, region,
                            tier_file, std::cref(options), std::ref(queue), verify_pass);
      }
    } catch (...) {
      queue.fail(std::current_exception());  // no thread: the started ones stop at their next chunk
    }
    run_stream(index, layout, destination, region, tier_file, options, queue, verify_pass);
  }  // joins every stream: none may still write into region once we return or throw
  queue.rethrow_failure();
}

/// fill_shard, where region may be a mapping of destination.file (its rows are then written
/// through the file), and tier_file that file when it is on a tier (see release_chunk).
void fill_region(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                 DestinationFile destination, const ShmSegment* tier_file,
                 const ShardLoadOptions& options) {
  check_load_streams(options.streams);
  layout.write_tables(region);
  auto chunks = plan_chunks(index, layout.range(), std::max<uint64_t>(options.chunk_bytes, 1));
  if (options.verify) {
    StreamQueue load(chunks, options);
    run_streams(index, layout, region, destination, tier_file, options, load, false);
    const ShardLoadOptions quiet{.streams = options.streams};  // progress was the load's
    StreamQueue check(std::move(chunks), quiet);
    run_streams(index, layout, region, destination, tier_file, options, check, true);
  } else {
    StreamQueue load(std::move(chunks), options);
    run_streams(index, layout, region, destination, tier_file, options, load, false);
  }
}

}  // namespace

void verify_shard_rows(const Index& index, const ShardLayout& layout, const std::byte* region,
                       ShardRange rows, OriginReader& reader, std::vector<std::byte>& bytes) {
  const ShardRange range = layout.range();
  std::vector<uint64_t> outside;
  for (uint32_t f = 0; f < index.fields().size(); ++f) {
    for (uint64_t s = rows.first; s < rows.last;) {
      const Block b = index.block(s, f);
      s = b.first_sample + b.rows;
      if (b.first_sample < rows.first && rows.first != range.first) continue;
      const uint64_t length = index.entry(b.first_sample, f).length;  // one run: one length
      bytes.resize(b.rows * length);
      for (uint64_t row = b.first_sample; row < s;) {
        if (row >= range.first && row < range.last) {
          if (length)
            std::memcpy(bytes.data() + (row - b.first_sample) * length,
                        region + layout.row_offset(row, f), length);
          ++row;
          continue;
        }
        outside.clear();
        for (; row < s && (row < range.first || row >= range.last); ++row) outside.push_back(row);
        reader.read(f, outside,
                    std::span(bytes).subspan((outside.front() - b.first_sample) * length,
                                             outside.size() * length));
      }
      if (checksum(bytes) != b.checksum) {
        const std::string rows = b.rows == 1
                                     ? std::string()
                                     : " (block of samples " + std::to_string(b.first_sample) +
                                           ".." + std::to_string(s - 1) + ")";
        throw ChecksumError("checksum mismatch loading " +
                                index.resolve(index.entry(b.first_sample, f).file).string() + rows,
                            {.sample = b.first_sample, .field = index.fields()[f].name});
      }
    }
  }
}

void check_load_streams(unsigned streams) {
  if (streams < 1 || streams > max_load_streams) {
    throw UsageError("--streams must be 1 to " + std::to_string(max_load_streams) + ", not " +
                     std::to_string(streams));
  }
}

void fill_shard(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                const ShardLoadOptions& options) {
  fill_region(index, layout, region, {}, nullptr, options);
}

ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options) {
  return load_shard(index, range,
                    ShmSegment::create(segment, ShardLayout(index, range).total_bytes()), options);
}

ShmSegment load_shard(const Index& index, ShardRange range, ShmSegment created,
                      const ShardLoadOptions& options) {
  ShardLayout layout(index, range);
  // Through the segment's file, not its mapping: a copy into the mapping would fault in, and
  // zero-fill, every 4 KiB page first, which costs more than the copy itself.
  fill_region(index, layout, created.writable(), {&created.file(), created.bytes().data()},
              ShmSegment::is_file(created.name()) ? &created : nullptr, options);
  return created;
}

}  // namespace ddstage
