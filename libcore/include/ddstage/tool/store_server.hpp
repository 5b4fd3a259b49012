// The server side of `ddstage serve`: every MPI rank holds shards; rank 0 takes control requests.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

#include "ddstage/settings.hpp"

namespace ddstage {

struct ServeOptions {
  std::filesystem::path dir;  ///< store directory (created if missing)
  std::string
      listen;  ///< "HOST[:PORT]" for rank 0's control socket; "" = this host's name, any port
  /// What the ranks offer readers besides shared memory: "fabric" opens a libfabric endpoint on
  /// every rank and registers each shard; "auto" does so when the ranks span several hosts
  /// (single-node stores then cost no progress thread); "shm" never.
  std::string transport = "auto";
  uint64_t mem_limit =
      0;              ///< bytes per rank; 0 = 80% of available memory shared by this node's ranks
  Settings settings;  ///< fabric.* (provider, domain), log level
  /// Called with the error that ends this rank, before MPI is finalised: under mpiexec the
  /// first rank to exit gets the others killed, maybe before they could say why they failed.
  std::function<void(const std::exception_ptr&)> report_failure;
};

/// Runs this process's rank of a store until a stop request (or SIGTERM/SIGINT), collective
/// over all MPI ranks; initialises and finalises MPI itself (one rank without mpiexec).
/// Throws UsageError before serving when DIR already holds a live store; replaces a stale
/// descriptor with a warning.
void run_store_server(const ServeOptions& options, int* argc, char*** argv);

}  // namespace ddstage
