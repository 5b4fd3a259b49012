#include "fabric/fabric_mr_cache.hpp"

#include <unistd.h>

#include <algorithm>

#include "batch_timer.hpp"

namespace ddstage::detail {

void* FabricMrCache::desc(FabricEndpoint& endpoint, const std::byte* lo, const std::byte* hi) {
  const auto a = reinterpret_cast<uintptr_t>(lo);
  const auto b = reinterpret_cast<uintptr_t>(hi);
  for (Entry& e : m_entries) {
    if (e.lo <= a && b <= e.hi) {
      e.batch = m_batch;
      return fi_mr_desc(e.mr.get());
    }
  }
  if (m_entries.size() >= m_capacity) {
    // Least recently used among those no read in flight can aim at; none: grow past capacity.
    auto idle = [this](const Entry& e) { return e.batch < m_batch; };
    auto victim = m_entries.end();
    for (auto it = m_entries.begin(); it != m_entries.end(); ++it) {
      if (idle(*it) && (victim == m_entries.end() || it->batch < victim->batch)) victim = it;
    }
    if (victim != m_entries.end()) m_entries.erase(victim);
  }
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = a & ~(page - 1);
  const uintptr_t end = (b + page - 1) & ~(page - 1);
  // A miss is the profile's registration stage; hits cost no clock read.
  profile_mark(ProfileStage::post);
  // Local keys only need to be unique in this reader's own domain.
  MrPtr mr = endpoint.register_memory(reinterpret_cast<const void*>(start), end - start, FI_READ,
                                      m_next_key++);
  profile_mark(ProfileStage::registration);
  void* d = fi_mr_desc(mr.get());
  m_entries.push_back({start, end, std::move(mr), m_batch});
  return d;
}

}  // namespace ddstage::detail
