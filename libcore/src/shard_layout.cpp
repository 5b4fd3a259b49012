#include "ddstage/tool/shard_layout.hpp"

#include <cstring>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

constexpr char shard_magic[8] = {'D', 'D', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr uint64_t alignment = 64;

/// Fixed start of a shard region; the field table follows it.
struct ShardHeader {
  char magic[8];
  uint32_t fields;
  uint32_t reserved;
  uint64_t first;
  uint64_t last;
  uint64_t total_bytes;
};

/// An index whose rows add up past 2^64 is refused before any rank sizes a region by a
/// wrapped number.
[[noreturn]] void too_large() {
  throw IndexError("the shard's rows add up to more bytes than can be addressed");
}

uint64_t checked_add(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) too_large();
  return sum;
}

uint64_t align_up(uint64_t v) {
  return checked_add(v, alignment - 1) / alignment * alignment;
}

}  // namespace

ShardLayout::ShardLayout(const Index& index, ShardRange range) : m_range(range) {
  const auto nfields = static_cast<uint32_t>(index.fields().size());
  uint64_t at = align_up(sizeof(ShardHeader) + nfields * sizeof(ShardFieldLayout));
  m_fields.resize(nfields);
  m_row_offsets.resize(nfields);
  for (uint32_t f = 0; f < nfields; ++f) {
    const auto& info = index.fields()[f];
    auto& layout = m_fields[f];
    uint64_t data_bytes = 0;
    // row_bytes 0 is what marks an offsets table in the region, so fixed rows of no bytes (a
    // shape with a 0 dimension) take the table too rather than arithmetic on a zero size.
    if (info.row_bytes == 0) {
      auto& offsets = m_row_offsets[f];
      offsets.reserve(range.count() + 1);
      for (uint64_t s = range.first; s < range.last; ++s) {
        offsets.push_back(data_bytes);
        data_bytes = checked_add(data_bytes, index.entry(s, f).length);
      }
      offsets.push_back(data_bytes);
      layout.offsets_offset = at;
      at = align_up(checked_add(at, offsets.size() * sizeof(uint64_t)));
    } else {
      layout.row_bytes = info.row_bytes;
      if (__builtin_mul_overflow(info.row_bytes, range.count(), &data_bytes)) too_large();
    }
    layout.data_offset = at;
    at = align_up(checked_add(at, data_bytes));
  }
  m_total = at;
}

void ShardLayout::write_tables(std::span<std::byte> region) const {
  if (region.size() < m_total)
    throw std::logic_error("ShardLayout: region smaller than the layout");
  ShardHeader h{};
  std::memcpy(h.magic, shard_magic, sizeof h.magic);
  h.fields = static_cast<uint32_t>(m_fields.size());
  h.first = m_range.first;
  h.last = m_range.last;
  h.total_bytes = m_total;
  std::memcpy(region.data(), &h, sizeof h);
  std::memcpy(region.data() + sizeof h, m_fields.data(),
              m_fields.size() * sizeof(ShardFieldLayout));
  for (std::size_t f = 0; f < m_fields.size(); ++f) {
    const auto& offsets = m_row_offsets[f];
    if (!offsets.empty()) {
      std::memcpy(region.data() + m_fields[f].offsets_offset, offsets.data(),
                  offsets.size() * sizeof(uint64_t));
    }
  }
}

uint64_t ShardLayout::row_offset(uint64_t sample, uint32_t field) const noexcept {
  const auto& f = m_fields[field];
  const uint64_t i = sample - m_range.first;
  return f.data_offset + (f.row_bytes ? i * f.row_bytes : m_row_offsets[field][i]);
}

ShardView::ShardView(std::span<const std::byte> region, uint32_t fields, ShardRange range)
    : m_region(region), m_range(range) {
  ShardHeader h{};
  if (region.size() < sizeof h + fields * sizeof(ShardFieldLayout))
    throw IndexError("shard region is truncated");
  std::memcpy(&h, region.data(), sizeof h);
  if (std::memcmp(h.magic, shard_magic, sizeof h.magic) != 0 || h.fields != fields ||
      h.first != range.first || h.last != range.last || h.total_bytes > region.size()) {
    throw IndexError("shard region does not hold the expected samples (" +
                     std::to_string(range.first) + "-" + std::to_string(range.last) + ")");
  }
  // The table sits at a 16-byte offset of a page-aligned mapping: aligned for uint64_t reads.
  m_fields = reinterpret_cast<const ShardFieldLayout*>(region.data() + sizeof h);
}

std::span<const std::byte> ShardView::row(uint64_t sample, uint32_t field) const noexcept {
  const auto& f = m_fields[field];
  const uint64_t i = sample - m_range.first;
  if (f.row_bytes) return m_region.subspan(f.data_offset + i * f.row_bytes, f.row_bytes);
  const auto* offsets = reinterpret_cast<const uint64_t*>(m_region.data() + f.offsets_offset);
  return m_region.subspan(f.data_offset + offsets[i], offsets[i + 1] - offsets[i]);
}

}  // namespace ddstage
