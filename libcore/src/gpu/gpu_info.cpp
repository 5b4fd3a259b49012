#include "ddstage/tool/gpu_info.hpp"

#include <fstream>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/atomic_file.hpp"
#include "gpu/device_registry.hpp"
#include "process.hpp"

namespace ddstage {

std::string_view memory_kind_name(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::host:
      return "host";
    case MemoryKind::cuda:
      return "cuda";
    case MemoryKind::hip:
      return "hip";
  }
  return "?";
}

std::string_view gpu_path_name(GpuPath path) noexcept {
  return path == GpuPath::direct ? "direct" : "staged";
}

std::vector<GpuRuntimeInfo> gpu_info() {
  std::vector<GpuRuntimeInfo> out;
  for (detail::DeviceRuntime* runtime : detail::device_runtimes()) {
    const detail::DeviceProbe& probe = runtime->probe();
    out.push_back(
        {runtime->kind(), probe.devices, probe.reason, probe.names, probe.register_read_only});
  }
  return out;
}

std::filesystem::path gpu_path_cache_file() {
  // One file per host: a home directory shared by every node must not give one node's answer
  // to another kind of node.
  const auto dir = default_cache_dir();
  return dir.empty() ? dir : dir / ("gpu-path-" + detail::host_name());
}

std::optional<GpuPath> cached_gpu_path() {
  const auto file = gpu_path_cache_file();
  if (file.empty()) return std::nullopt;
  std::ifstream in(file);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  if (word == "direct") return GpuPath::direct;
  if (word == "staged") return GpuPath::staged;
  return std::nullopt;
}

void cache_gpu_path(GpuPath path) {
  const auto file = gpu_path_cache_file();
  if (file.empty())
    throw UsageError("cannot cache the GPU path: neither XDG_CACHE_HOME nor HOME is set");
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) throw IoError("mkdir " + file.parent_path().string(), ec.value());
  // Whole or absent: a reader on another rank of this node may look at it meanwhile.
  AtomicFile out(file);
  out.write(std::string(gpu_path_name(path)) + "\n");
  out.commit();
}

}  // namespace ddstage
