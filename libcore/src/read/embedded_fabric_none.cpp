// A build without libfabric: the registry's probe refuses transport "fabric" before a Store
// gets here, so this only keeps the Store linkable.
#include "ddstage/error.hpp"
#include "read/embedded_fabric.hpp"

namespace ddstage::detail {

struct EmbeddedFabric::Impl {};

EmbeddedFabric::EmbeddedFabric(const Settings&, MPI_Comm) {
  throw UsageError("StoreOptions::transport fabric: this ddstage was built without libfabric");
}

EmbeddedFabric::~EmbeddedFabric() = default;

std::unique_ptr<ShardRegistration> EmbeddedFabric::expose(std::span<const std::byte>,
                                                          const std::vector<ShardLayout>&,
                                                          const std::vector<const std::byte*>&,
                                                          std::vector<FabricRemote>&) {
  return nullptr;
}

}  // namespace ddstage::detail
