// `ddstage info --fabric` in a build without libfabric.
#include "ddstage/error.hpp"
#include "ddstage/tool/fabric_info.hpp"

namespace ddstage {

std::vector<FabricProviderInfo> describe_fabric_providers(const Settings&) {
  throw UsageError("this ddstage was built without libfabric (DDSTAGE_WITH_FABRIC=OFF)");
}

}  // namespace ddstage
