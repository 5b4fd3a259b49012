// This host's name: how store.yaml, errors, profiles and bench reports name a node.
#pragma once

#include <string>

namespace ddstage {

/// gethostname(2), as server ranks record it in store.yaml; empty if it fails.
std::string host_name();

}  // namespace ddstage
