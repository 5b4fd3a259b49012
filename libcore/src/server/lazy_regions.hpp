// The regions a rank stages on first touch (load --lazy), as its stage workers find them: by
// segment, for as long as the rank holds them, and never freed under a stage request.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "lazy_region.hpp"

namespace ddstage::detail {

class LazyRegions {
 public:
  /// One lazy region a rank holds: findable while it lives. Its destructor unlists it, waits
  /// until no stage request uses it any more, then stops its prefetch: only then may the memory
  /// under it go (declare it after the segment it writes into).
  class Entry {
   public:
    Entry() = default;
    /// Lays the region out in `bytes` (the segment's mapping) and lists it under `segment`.
    Entry(LazyRegions& regions, const std::string& dataset, const std::string& segment, Index index,
          const ShardLayout& layout, std::span<std::byte> bytes, LazyRegionOptions options);
    Entry(Entry&& other) noexcept = default;
    Entry& operator=(Entry&& other) noexcept;
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry();

    explicit operator bool() const noexcept { return static_cast<bool>(m_region); }
    LazyRegion& region() const noexcept { return *m_region; }

   private:
    void release() noexcept;

    LazyRegions* m_regions = nullptr;
    std::string m_segment;
    std::shared_ptr<LazyRegion> m_region;  // aliases its holder, which keeps the index too
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
