#include "ddstage/shard_loader.hpp"

#include <vector>

#include "ddstage/origin_reader.hpp"
#include "ddstage/shard_layout.hpp"

namespace ddstage {
namespace {

/// Entries handed to one read_entries call: bounds the request list, not the I/O size.
constexpr std::size_t entries_per_chunk = 1u << 16;

}  // namespace

ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options) {
  ShardLayout layout(index, range);
  auto shm = ShmSegment::create(segment, layout.total_bytes());
  auto region = shm.writable();
  layout.write_tables(region);
  OriginReader reader(index, {.verify = options.verify, .allow_stale = options.allow_stale});
  const auto fields = static_cast<uint32_t>(index.fields().size());
  std::vector<EntryRead> reads;
  reads.reserve(entries_per_chunk);
  uint64_t loaded = 0;
  auto flush = [&] {
    reader.read_entries(reads);
    for (const auto& r : reads) loaded += index.entry(r.sample, r.field).length;
    reads.clear();
    if (options.progress) options.progress(loaded);
  };
  // Sample-major within a chunk: the fields of one sample often sit together in the file.
  for (uint64_t s = range.first; s < range.last; ++s) {
    for (uint32_t f = 0; f < fields; ++f) reads.push_back({s, f, region.data() + layout.row_offset(s, f)});
    if (reads.size() >= entries_per_chunk) flush();
  }
  if (!reads.empty()) flush();
  return shm;
}

}  // namespace ddstage
