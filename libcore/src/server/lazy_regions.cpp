#include "server/lazy_regions.hpp"

#include <utility>

namespace ddstage::detail {
namespace {

/// A region, the segment it writes into and the index it reads by, alive together; destroyed
/// region first (its prefetch joined), segment last.
struct Holder {
  Holder(ShmSegment segment_, Index index_, const ShardLayout& layout, LazyRegionOptions options)
      : segment(std::move(segment_)),
        index(std::move(index_)),
        region(index, layout, segment.writable(), options) {}
  ShmSegment segment;
  Index index;
  LazyRegion region;
};

}  // namespace

LazyRegions::Entry::Entry(LazyRegions& regions, const std::string& dataset, ShmSegment segment,
                          Index index, const ShardLayout& layout, LazyRegionOptions options)
    : m_regions(&regions), m_segment(segment.name()) {
  auto holder = std::make_shared<Holder>(std::move(segment), std::move(index), layout, options);
  m_bytes = holder->segment.bytes();
  m_region = std::shared_ptr<LazyRegion>(holder, &holder->region);
  std::lock_guard lock(regions.m_mutex);
  regions.m_listed[m_segment] = {dataset, m_region};
}

LazyRegions::Entry& LazyRegions::Entry::operator=(Entry&& other) noexcept {
  if (this != &other) {
    release();
    m_regions = std::exchange(other.m_regions, nullptr);
    m_segment = std::move(other.m_segment);
    m_region = std::move(other.m_region);
    m_bytes = std::exchange(other.m_bytes, {});
  }
  return *this;
}

LazyRegions::Entry::~Entry() {
  release();
}

void LazyRegions::Entry::release() noexcept {
  if (!m_region) return;
  {
    std::lock_guard lock(m_regions->m_mutex);
    m_regions->m_listed.erase(m_segment);
  }
  // Unlisted: no new stage request finds it. One still staging keeps the holder, segment
  // included, until it returns; the last reference stops the prefetch, then unmaps.
  m_region.reset();
  m_bytes = {};
}

std::shared_ptr<LazyRegion> LazyRegions::find(const std::string& dataset,
                                              const std::string& segment) const {
  std::lock_guard lock(m_mutex);
  const auto it = m_listed.find(segment);
  if (it == m_listed.end() || it->second.dataset != dataset) return nullptr;
  return it->second.region.lock();
}

}  // namespace ddstage::detail
