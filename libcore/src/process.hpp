// Facts about processes on this host: how clients and stop decide a server rank is gone.
#pragma once

#include <cstdint>
#include <string>

namespace ddstage::detail {

/// This host's name, as server ranks record it in store.yaml.
std::string host_name();
/// Now, in UTC, as ISO 8601 ("2026-12-01T03:40:00Z"): for manifests and descriptors.
std::string utc_now();
/// True if pid runs. A zombie (killed, not yet reaped by its parent, e.g. under a container's
/// PID 1 that reaps nothing) is dead: kill(pid, 0) alone would call it alive.
bool process_alive(int64_t pid);
/// True if pid is alive and its command line mentions ddstage: never signal a reused pid.
bool is_ddstage_process(int64_t pid);
/// MemAvailable from /proc/meminfo in bytes (0 when unknown): what a shard may take without
/// pushing the node into swap or the OOM killer.
uint64_t mem_available();
/// The default memory a shard holder may use: 80% of mem_available(), shared by the holders
/// on this node. (The other 20% is for the page cache that loads read through and the app.)
uint64_t default_mem_limit(int holders_on_node);

}  // namespace ddstage::detail
