// The server side of `ddstage serve`: every MPI rank holds shards; rank 0 takes control requests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ddstage {

struct ServeOptions {
  std::filesystem::path dir;       ///< store directory (created if missing)
  std::string listen;              ///< "HOST[:PORT]" for rank 0's control socket; "" = this host's name, any port
  std::string transport = "auto";  ///< auto | shm
  uint64_t mem_limit = 0;          ///< bytes per rank; 0 = 80% of available memory shared by this node's ranks
};

/// Runs this process's rank of a store until a stop request (or SIGTERM/SIGINT), collective
/// over all MPI ranks; initialises and finalises MPI itself (one rank without mpiexec).
/// Throws UsageError before serving when DIR already holds a live store; replaces a stale
/// descriptor with a warning.
void run_store_server(const ServeOptions& options, int* argc, char*** argv);

}  // namespace ddstage
