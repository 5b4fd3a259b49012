// What libfabric offers on this node, for `ddstage info --fabric`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddstage/settings.hpp"

namespace ddstage {

/// One RMA-capable reliable-datagram provider entry libfabric reports.
struct FabricProviderInfo {
  std::string provider;  ///< "tcp;ofi_rxm", "shm", "cxi", ...
  std::string fabric;    ///< fabric name (a subnet for IP providers)
  std::string domain;    ///< domain / interface ("lo", "cxi0")
  std::string mr_mode;   ///< FI_MR_* bits the provider asks of us, "|"-joined
  uint64_t max_msg_size = 0;
  std::string progress;  ///< data progress: "manual" (needs a progress thread) or "auto"
  bool chosen = false;   ///< what fabric.provider / fabric.domain pick on this node
  std::string why;       ///< why it is, or is not, the one picked
};

/// Every entry, in libfabric's order, with the choice fabric.provider and fabric.domain make
/// (none chosen when they name something absent). Throws UsageError when ddstage was built
/// without libfabric.
std::vector<FabricProviderInfo> describe_fabric_providers(const Settings& settings);

}  // namespace ddstage
