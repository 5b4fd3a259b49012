// The only file outside cuda/ and hip/ that knows which runtimes were built.
#include "gpu/device_registry.hpp"

#include <array>
#include <string>

#include <fmt/format.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"

namespace ddstage::detail {
namespace {

std::vector<DeviceRuntime*> built_runtimes() {
  std::vector<DeviceRuntime*> out;
#if DDSTAGE_HAVE_CUDA
  out.push_back(&cuda_runtime());
#endif
#if DDSTAGE_HAVE_HIP
  out.push_back(&hip_runtime());
#endif
  return out;
}

/// Why no runtime offers `device`: each runtime's reason, or its device count.
[[noreturn]] void throw_no_gpu(int device) {
  const auto runtimes = device_runtimes();
  if (runtimes.empty()) {
    throw Error(ErrorKind::runtime,
                "no GPU: this ddstage was built without CUDA and HIP (configure with "
                "-DDDSTAGE_WITH_CUDA=ON or -DDDSTAGE_WITH_HIP=ON)");
  }
  std::string why;
  for (DeviceRuntime* runtime : runtimes) {
    const DeviceProbe& probe = runtime->probe();
    if (!why.empty()) why += "; ";
    why += probe.devices > 0
               ? fmt::format("{} has {} device(s), not device {}",
                             memory_kind_name(runtime->kind()), probe.devices, device)
               : fmt::format("{}: {}", memory_kind_name(runtime->kind()), probe.reason);
  }
  throw Error(ErrorKind::runtime, "no GPU: " + why);
}

}  // namespace

std::span<DeviceRuntime* const> device_runtimes() {
  static const std::vector<DeviceRuntime*> runtimes = built_runtimes();
  return runtimes;
}

DeviceRuntime& runtime_with_device(int device) {
  if (device >= 0) {
    for (DeviceRuntime* runtime : device_runtimes()) {
      if (runtime->probe().devices > device) return *runtime;
    }
  }
  throw_no_gpu(device);
}

DeviceRuntime& runtime_of(const DeviceBuffer& dest) {
  DeviceRuntime& runtime = runtime_with_device(dest.device);
  for (DeviceRuntime* candidate : device_runtimes()) {
    if (candidate->probe().devices > 0 && candidate->device_of(dest.ptr) == dest.device)
      return *candidate;
  }
  throw UsageError(fmt::format("DeviceBuffer: {} is not {} device memory of device {}", dest.ptr,
                               memory_kind_name(runtime.kind()), dest.device));
}

}  // namespace ddstage::detail

namespace ddstage {

int device_of(const void* ptr) {
  bool any_device = false;
  for (detail::DeviceRuntime* runtime : detail::device_runtimes()) {
    if (runtime->probe().devices == 0) continue;
    any_device = true;
    if (const auto device = runtime->device_of(ptr)) return *device;
  }
  if (!any_device) detail::throw_no_gpu(0);
  throw UsageError(fmt::format("{} is not device memory of any GPU here", ptr));
}

}  // namespace ddstage
