// What GPU support this ddstage has and what it finds on this node, for `ddstage info` and for
// tools that choose a destination.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ddstage/device_buffer.hpp"

namespace ddstage {

/// One GPU runtime this build contains.
struct GpuRuntimeInfo {
  MemoryKind kind = MemoryKind::cuda;
  int devices = 0;                        ///< devices usable here; 0 when there are none
  std::string reason;                     ///< why there are none (any runtime error counts)
  std::vector<std::string> device_names;  ///< "NVIDIA H200", by device number
  /// By device number: whether memory mapped read-only (a store's shared memory) can be
  /// page-locked; where not, gpu.path=direct copies from it are pageable, staged by the driver.
  std::vector<bool> host_register_read_only;
};

/// The runtimes built in (CUDA first, then HIP), each probed on this node; empty when ddstage
/// was built without CUDA and HIP.
std::vector<GpuRuntimeInfo> gpu_info();

/// The get_batch paths to device memory (the `gpu.path` setting adds "auto").
enum class GpuPath : uint8_t { direct, staged };

/// "direct", "staged".
std::string_view gpu_path_name(GpuPath path) noexcept;

/// Where `gpu.path=auto` looks for this node's faster path, as `ddstage bench` measured it:
/// $XDG_CACHE_HOME/ddstage/gpu-path-HOST, else ~/.cache/ddstage/gpu-path-HOST; empty when
/// neither variable is set.
std::filesystem::path gpu_path_cache_file();
/// The path cached for this node; nullopt when none is (or the file holds something else).
std::optional<GpuPath> cached_gpu_path();
/// Records path as this node's faster one, for later `gpu.path=auto` readers (a bench calls
/// this). IoError when the file cannot be written.
void cache_gpu_path(GpuPath path);

}  // namespace ddstage
