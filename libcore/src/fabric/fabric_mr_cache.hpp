// Local registrations of a reader's destination buffers, for providers that need them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/fabric_endpoint.hpp"

namespace ddstage::detail {

/// Registers destination ranges (page-aligned) for FI_MR_LOCAL providers and keeps the last few,
/// so a reader that reuses its buffers registers each once, never per row. A registration used
/// since the last batch_done() is never evicted: reads in flight may still aim at it. A cached
/// registration is trusted while its range is mapped: a caller that frees a buffer and maps
/// another at the same address must clear() first.
class FabricMrCache {
 public:
  explicit FabricMrCache(std::size_t capacity = 8) : m_capacity(capacity) {}

  /// fi_mr_desc of a registration covering [lo, hi), made on `endpoint` on a miss.
  void* desc(FabricEndpoint& endpoint, const std::byte* lo, const std::byte* hi);
  /// The current batch completed: its registrations may be evicted again.
  void batch_done() noexcept { ++m_batch; }
  /// Closes every registration (before the endpoint they were made on closes).
  void clear() noexcept { m_entries.clear(); }

 private:
  struct Entry {
    uintptr_t lo;
    uintptr_t hi;
    MrPtr mr;
    uint64_t batch;  // last batch that used it
  };
  std::size_t m_capacity;
  std::vector<Entry> m_entries;
  uint64_t m_batch = 1;
  uint64_t m_next_key = 1;
};

}  // namespace ddstage::detail
