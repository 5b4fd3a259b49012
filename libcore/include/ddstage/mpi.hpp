// Opt-in MPI conveniences for apps that embed a Store. This is the only public ddstage header
// that includes <mpi.h>: include it only from code compiled against the same MPI as libcore.
#pragma once

#include <mpi.h>

#include "ddstage/store.hpp"

namespace ddstage {

/// A Store over comm (collective; see Store). MPI must be initialised.
inline Store make_store(MPI_Comm comm, StoreOptions options = {}) {
  return Store(MPI_Comm_c2f(comm), options);
}

}  // namespace ddstage
