#include "transport/copy_transport.hpp"

#include <cstring>

namespace ddstage::detail {

CopyTransport::CopyTransport(std::string name,
                             const std::vector<std::span<const std::byte>>& regions,
                             const std::vector<const FileDescriptor*>& files)
    : m_name(std::move(name)), m_files(files) {
  m_bases.reserve(regions.size());
  for (const auto& region : regions) m_bases.push_back(region.data());
  m_files.resize(regions.size(), nullptr);
}

void CopyTransport::post(std::span<const ReadOp> reads) {
  // The Reader already coalesced adjacent rows, so each op is one run of a region.
  for (const ReadOp& op : reads) {
    // A tier file's mapping would fault a page at a time when cold (it is mapped MADV_RANDOM);
    // one pread asks the device for the whole run.
    if (const FileDescriptor* file = m_files[static_cast<std::size_t>(op.target)]) {
      file->pread_exact({op.dest, op.bytes}, op.offset);
    } else {
      std::memcpy(op.dest, m_bases[op.target] + op.offset, op.bytes);
    }
  }
}

}  // namespace ddstage::detail
