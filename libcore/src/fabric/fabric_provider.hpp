// Which libfabric provider and domain the fabric transport runs on.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ddstage/tool/fabric_info.hpp"
#include "fabric/fabric_handles.hpp"

namespace ddstage::detail {

/// The FI_MR_* modes ddstage handles; providers asking for others are not offered.
inline constexpr int handled_mr_modes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

/// What a server runs on: `provider` is "auto" (the best RMA-capable RDM provider present, in
/// the order cxi, verbs;ofi_rxm, efa, psm3, tcp;ofi_rxm, net, shm) or a name ("tcp" matches
/// "tcp;ofi_rxm"); `domain` filters by domain name when not empty. Returns one fi_info (not a
/// list). A named provider or domain that is absent is a UsageError listing what exists.
InfoPtr choose_provider(const std::string& provider, const std::string& domain);

/// What a reader runs on to reach a server running `provider` (its exact name): that provider
/// in `domain` (any when empty), preferring entries whose addresses are `address_bytes` long.
InfoPtr find_provider(const std::string& provider, const std::string& domain,
                      std::size_t address_bytes);

/// Every RMA-capable RDM entry with what choose_provider(provider, domain) makes of it.
std::vector<FabricProviderInfo> describe_providers(const std::string& provider,
                                                   const std::string& domain);

}  // namespace ddstage::detail
