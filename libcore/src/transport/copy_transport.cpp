#include "transport/copy_transport.hpp"

#include <cstring>

namespace ddstage::detail {

CopyTransport::CopyTransport(std::string name,
                             const std::vector<std::span<const std::byte>>& regions)
    : m_name(std::move(name)) {
  m_bases.reserve(regions.size());
  for (const auto& region : regions) m_bases.push_back(region.data());
}

void CopyTransport::post(std::span<const ReadOp> reads) {
  // The Reader already coalesced adjacent rows, so each op is one run of a region.
  for (const ReadOp& op : reads) std::memcpy(op.dest, m_bases[op.target] + op.offset, op.bytes);
}

}  // namespace ddstage::detail
