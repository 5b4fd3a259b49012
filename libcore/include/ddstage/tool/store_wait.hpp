// Waiting for a store that `serve` is starting: what a job script runs between `serve &` and
// the first `load`.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>

#include "ddstage/store_descriptor.hpp"

namespace ddstage {

struct WaitOptions {
  std::filesystem::path dir;
  std::chrono::milliseconds timeout{60000};          ///< for the whole wait
  std::chrono::milliseconds control_timeout{30000};  ///< at most this per status request
  /// The launcher of the serve (mpiexec, srun, or serve itself): once it has exited, the store
  /// will not come. 0: none to watch.
  int64_t pid = 0;
};

/// Returns the descriptor once a live store answers at DIR: store.yaml is there, trusted
/// (StoreDescriptor::read's checks), and its rank 0 answers a status request with its token. A
/// dead store's leftover store.yaml does not count: polling goes on (a new serve replaces it).
/// Error (run time) when the timeout passes or the pid exits first, naming what was seen;
/// UsageError at once for a store directory or store.yaml that is not the user's own.
StoreDescriptor wait_for_store(const WaitOptions& options);

}  // namespace ddstage
