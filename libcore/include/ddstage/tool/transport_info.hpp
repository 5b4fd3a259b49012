// The transports store reads can travel by, for `ddstage info --settings` and `info --fabric`.
#pragma once

#include <string>
#include <vector>

namespace ddstage {

/// One entry of the transport registry as a user sees it.
struct TransportInfo {
  std::string name;         ///< "shm", "mpi", "fabric": the value transport options take
  std::string description;  ///< one line: how reads travel
  bool available = false;   ///< usable in this build on this node
  std::string why_not;      ///< one line when not available
};

/// Every transport, built or not, in the registry's fixed order, with what its probe says here.
std::vector<TransportInfo> describe_transports();

}  // namespace ddstage
