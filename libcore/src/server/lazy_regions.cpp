#include "server/lazy_regions.hpp"

#include <chrono>
#include <thread>
#include <utility>

namespace ddstage::detail {
namespace {

/// A region and the index it points into, alive together.
struct Holder {
  Holder(Index index_, const ShardLayout& layout, std::span<std::byte> bytes,
         LazyRegionOptions options)
      : index(std::move(index_)), region(index, layout, bytes, options) {}
  Index index;
  LazyRegion region;
};

}  // namespace

LazyRegions::Entry::Entry(LazyRegions& regions, const std::string& dataset,
                          const std::string& segment, Index index, const ShardLayout& layout,
                          std::span<std::byte> bytes, LazyRegionOptions options)
    : m_regions(&regions), m_segment(segment) {
  auto holder = std::make_shared<Holder>(std::move(index), layout, bytes, options);
  m_region = std::shared_ptr<LazyRegion>(holder, &holder->region);
  std::lock_guard lock(regions.m_mutex);
  regions.m_listed[segment] = {dataset, m_region};
}

LazyRegions::Entry& LazyRegions::Entry::operator=(Entry&& other) noexcept {
  if (this != &other) {
    release();
    m_regions = std::exchange(other.m_regions, nullptr);
    m_segment = std::move(other.m_segment);
    m_region = std::move(other.m_region);
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
  // Unlisted: no new stage request finds it. One still staging holds its own reference and
  // writes into the segment until it returns; a first touch reads origin, so this is bounded by
  // how long one read of a batch's samples takes.
  while (m_region.use_count() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m_region.reset();  // stops the prefetch
}

std::shared_ptr<LazyRegion> LazyRegions::find(const std::string& dataset,
                                              const std::string& segment) const {
  std::lock_guard lock(m_mutex);
  const auto it = m_listed.find(segment);
  if (it == m_listed.end() || it->second.dataset != dataset) return nullptr;
  return it->second.region.lock();
}

}  // namespace ddstage::detail
