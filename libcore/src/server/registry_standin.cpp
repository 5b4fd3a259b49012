// STAND-IN, to be deleted at merge: parse_transport as the "transports" helper's registry
// (transport/transport_registry.cpp) provides it, so that serve links on this branch alone.
#include <algorithm>
#include <string>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "transport/transport_registry.hpp"

namespace ddstage::detail {

std::optional<TransportId> parse_transport(std::string_view value,
                                           std::span<const TransportId> allowed, bool allowed_auto,
                                           std::string_view option) {
  if (allowed_auto && value == "auto") return std::nullopt;
  const std::pair<std::string_view, TransportId> names[] = {
      {"shm", TransportId::shm}, {"mpi", TransportId::mpi}, {"fabric", TransportId::fabric}};
  for (const auto& [name, id] : names) {
    if (name != value || std::find(allowed.begin(), allowed.end(), id) == allowed.end()) continue;
    if (id == TransportId::fabric && !DDSTAGE_HAVE_FABRIC) {
      throw UsageError(std::string(option) + " fabric: this ddstage was built without libfabric");
    }
    return id;
  }
  throw UsageError("bad " + std::string(option) + " '" + std::string(value) + "'");
}

}  // namespace ddstage::detail
