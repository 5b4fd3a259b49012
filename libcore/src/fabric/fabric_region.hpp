// A host memory region a server exposes to remote reads.
#pragma once

#include <cstddef>
#include <span>

#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_peer.hpp"

namespace ddstage::detail {

/// Registers a region once for FI_REMOTE_READ on an endpoint's domain. The memory and the
/// endpoint must outlive it. Move-only.
class FabricRegion {
 public:
  /// Keys are the provider's when it picks them (FI_MR_PROV_KEY), else random ones that fit the
  /// domain's key size (a reader guessing keys finds nothing).
  FabricRegion(FabricEndpoint& endpoint, std::span<const std::byte> memory);

  /// What readers need: key, base (virtual address under FI_MR_VIRT_ADDR, else 0) and length.
  FabricRegionInfo info() const noexcept { return m_info; }

 private:
  MrPtr m_mr;
  FabricRegionInfo m_info;
};

}  // namespace ddstage::detail
