#include "ddstage/shard_loader.hpp"

#include <vector>

#include "ddstage/origin_reader.hpp"

namespace ddstage {
namespace {

/// Entries handed to one read_entries call: bounds the request list, not the I/O size.
constexpr std::size_t entries_per_chunk = 1u << 16;

}  // namespace

void fill_shard(const Index& index, const ShardLayout& layout, std::span<std::byte> region,
                const ShardLoadOptions& options) {
  layout.write_tables(region);
  OriginReader reader(index, {.verify = options.verify, .allow_stale = options.allow_stale});
  const auto fields = static_cast<uint32_t>(index.fields().size());
  const ShardRange range = layout.range();
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
}

ShmSegment load_shard(const Index& index, ShardRange range, const std::string& segment,
                      const ShardLoadOptions& options) {
  ShardLayout layout(index, range);
  auto shm = ShmSegment::create(segment, layout.total_bytes());
  fill_shard(index, layout, shm.writable(), options);
  return shm;
}

}  // namespace ddstage
