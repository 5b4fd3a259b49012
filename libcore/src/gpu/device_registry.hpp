// The GPU runtimes this build contains, and the lookups that turn "no runtime, no driver, no
// device" into one clear error.
#pragma once

#include <span>

#include "ddstage/device_buffer.hpp"
#include "gpu/device_runtime.hpp"

namespace ddstage::detail {

/// Built runtimes, CUDA first; empty in a host-only build.
std::span<DeviceRuntime* const> device_runtimes();

/// The runtime whose memory dest.ptr is on dest.device. Error "no GPU: <reason>" when no
/// runtime is built or none finds a device; UsageError when ptr is not device memory of
/// dest.device.
DeviceRuntime& runtime_of(const DeviceBuffer& dest);

/// The first runtime that has `device`; Error "no GPU: <reason>" otherwise.
DeviceRuntime& runtime_with_device(int device);

}  // namespace ddstage::detail
