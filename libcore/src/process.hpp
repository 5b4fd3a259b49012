// Facts about processes on this host: how clients and stop decide a server rank is gone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "ddstage/tool/host_name.hpp"

namespace ddstage::detail {

using ddstage::host_name;
/// Now, in UTC, as ISO 8601 ("2026-12-01T03:40:00Z"): for manifests and descriptors.
std::string utc_now();
/// True if pid runs. A zombie (killed, not yet reaped by its parent, e.g. under a container's
/// PID 1 that reaps nothing) is dead: kill(pid, 0) alone would call it alive.
bool process_alive(int64_t pid);
/// MemAvailable from /proc/meminfo in bytes (0 when unknown): what a shard may take without
/// pushing the node into swap or the OOM killer.
uint64_t mem_available();
/// A default memory limit and, for logs and errors, the bound that set it.
struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  ///< "80% of MemAvailable" or "free space of /dev/shm", "shared by N holders"
};
/// The default memory a shard holder may use: 80% of mem_available() (the other 20% is for
/// the page cache that loads read through, and the app), capped by the free space of the
/// file system at shm_dir, where shards live as shared memory (a job's /dev/shm is often far
/// smaller than its RAM), both shared by the holders on this node. No cap when shm_dir
/// cannot be measured.
MemoryLimit default_memory_limit(int holders_on_node,
                                 const std::filesystem::path& shm_dir = "/dev/shm");
/// default_memory_limit(holders_on_node).bytes
uint64_t default_mem_limit(int holders_on_node);

}  // namespace ddstage::detail
