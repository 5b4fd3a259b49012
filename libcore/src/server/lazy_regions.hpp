// The regions a rank stages on first touch (load --lazy), as its stage workers find them: by
// segment, for as long as the rank holds them, and never unmapped under a stage request.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "lazy_region.hpp"

namespace ddstage::detail {

class LazyRegions {
 public:
  /// One lazy region a rank holds, with the segment it fills: findable while the entry lives.
  /// The segment, the index and the region live together, shared with the stage requests
  /// staging into them: the entry's end unlists the region, and the last request to finish (or
  /// the entry, when none runs) stops the prefetch and only then unmaps the segment. So neither
  /// a slow origin read nor a hung one ever holds up the rank that drops the region.
  class Entry {
   public:
    Entry() = default;
    /// Lays the region out in `segment` (created for it, empty) and lists it under its name.
    Entry(LazyRegions& regions, const std::string& dataset, ShmSegment segment, Index index,
          const ShardLayout& layout, LazyRegionOptions options);
    Entry(Entry&& other) noexcept = default;
    Entry& operator=(Entry&& other) noexcept;
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry();

    explicit operator bool() const noexcept { return static_cast<bool>(m_region); }
    LazyRegion& region() const noexcept { return *m_region; }
    /// The segment's mapping (empty for no entry).
    std::span<const std::byte> bytes() const noexcept { return m_bytes; }

   private:
    void release() noexcept;

    LazyRegions* m_regions = nullptr;
    std::string m_segment;
    std::shared_ptr<LazyRegion> m_region;  // aliases its holder: segment, index and region
    std::span<const std::byte> m_bytes;
  };

  /// The region of `dataset` in `segment`, or null when this rank holds none (any more).
  std::shared_ptr<LazyRegion> find(const std::string& dataset, const std::string& segment) const;

 private:
  struct Listed {
    std::string dataset;
    std::weak_ptr<LazyRegion> region;
  };
  mutable std::mutex m_mutex;
  std::map<std::string, Listed> m_listed;  // by segment
};

}  // namespace ddstage::detail
