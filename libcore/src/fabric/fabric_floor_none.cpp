// The fabric floor in a build without libfabric: a clear error instead.
#include "ddstage/error.hpp"
#include "ddstage/tool/fabric_floor.hpp"

namespace ddstage {
namespace {

[[noreturn]] void no_fabric() {
  throw UsageError(
      "this ddstage was built without libfabric (DDSTAGE_WITH_FABRIC=OFF): no fabric floor to "
      "measure");
}

}  // namespace

struct FabricFloorTarget::State {};
struct FabricFloorReader::State {
  std::string provider;
};

FabricFloorTarget::FabricFloorTarget(const Settings&, uint64_t) {
  no_fabric();
}
FabricFloorTarget::FabricFloorTarget(FabricFloorTarget&&) noexcept = default;
FabricFloorTarget& FabricFloorTarget::operator=(FabricFloorTarget&&) noexcept = default;
FabricFloorTarget::~FabricFloorTarget() = default;
std::string FabricFloorTarget::address() const {
  no_fabric();
}

FabricFloorReader::FabricFloorReader(const Settings&, const std::string&) {
  no_fabric();
}
FabricFloorReader::FabricFloorReader(FabricFloorReader&&) noexcept = default;
FabricFloorReader& FabricFloorReader::operator=(FabricFloorReader&&) noexcept = default;
FabricFloorReader::~FabricFloorReader() = default;
const std::string& FabricFloorReader::provider() const noexcept {
  return m->provider;
}
FabricFloorRun FabricFloorReader::run(uint64_t, uint64_t, uint64_t, uint64_t) {
  no_fabric();
}

}  // namespace ddstage
