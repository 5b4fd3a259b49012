// The `local` and `shm` transports: regions mapped into this process, read with memcpy.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "ddstage/tool/file_descriptor.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// Reads from regions this process has mapped: its own rank's shard (`local`) or same-node
/// ranks' shared-memory segments mapped read-only (`shm`). A read is one memcpy (one pread for
/// a region in a tier file) and is complete when post returns, so wait has nothing to do.
class CopyTransport final : public Transport {
 public:
  /// regions[target]: the mapped region of each target, empty for targets this transport does
  /// not reach; files[target], when there and not null: the region's file, read with pread
  /// instead. Both must outlive the transport.
  CopyTransport(std::string name, const std::vector<std::span<const std::byte>>& regions,
                const std::vector<const FileDescriptor*>& files = {});

  std::string_view name() const noexcept override { return m_name; }
  void post(std::span<const ReadOp> reads) override;
  void wait() override {}
  void quiesce() noexcept override {}

 private:
  std::string m_name;
  std::vector<const std::byte*> m_bases;       // per target
  std::vector<const FileDescriptor*> m_files;  // per target: pread from it when not null
};

}  // namespace ddstage::detail
