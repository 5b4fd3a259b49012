// The in-memory layout of one rank's shard: what servers fill and readers address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_plan.hpp"

namespace ddstage {

/// Where one field's rows sit inside a shard region. Fixed-size rows are found by arithmetic;
/// variable ones through an offsets table stored in the region itself, so a reader that maps
/// the region needs no per-sample table of its own.
struct ShardFieldLayout {
  uint64_t data_offset = 0;  ///< first row's bytes
  uint64_t offsets_offset =
      0;                   ///< count+1 uint64 row offsets (relative to data_offset); variable only
  uint64_t row_bytes = 0;  ///< fixed rows; 0 when variable
};

/// A shard region: a small header, then per field (field-major) an optional offsets table and
/// the rows of samples [first, last) back to back, each part 64-byte aligned.
class ShardLayout {
 public:
  /// Layout for `range` of `index` (reads the index's entry lengths).
  ShardLayout(const Index& index, ShardRange range);

  uint64_t total_bytes() const noexcept { return m_total; }
  const ShardRange& range() const noexcept { return m_range; }
  const std::vector<ShardFieldLayout>& fields() const noexcept { return m_fields; }

  /// Writes the header and offsets tables into region (total_bytes() long); rows come next.
  void write_tables(std::span<std::byte> region) const;
  /// Where (sample, field)'s bytes go in the region; sample must be in range().
  uint64_t row_offset(uint64_t sample, uint32_t field) const noexcept;

 private:
  ShardRange m_range;
  std::vector<ShardFieldLayout> m_fields;
  std::vector<std::vector<uint64_t>> m_row_offsets;  // variable fields only, count+1 each
  uint64_t m_total = 0;
};

/// Read-only view of a filled shard region (e.g. mapped from another process): validates the
/// header and answers where each row is, O(1).
class ShardView {
 public:
  ShardView() = default;
  /// IndexError if the region's header is not a shard of `fields` fields for `range`.
  ShardView(std::span<const std::byte> region, uint32_t fields, ShardRange range);

  /// The bytes of (sample, field); sample must be in the view's range.
  std::span<const std::byte> row(uint64_t sample, uint32_t field) const noexcept;
  const ShardRange& range() const noexcept { return m_range; }

 private:
  std::span<const std::byte> m_region;
  const ShardFieldLayout* m_fields = nullptr;
  ShardRange m_range;
};

}  // namespace ddstage
