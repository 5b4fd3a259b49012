// DeviceRuntime over the HIP runtime API (host calls only: no kernels, so no hipcc needed).
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "gpu/device_runtime.hpp"

namespace ddstage::detail {
namespace {

/// Builds the message only on failure: these calls sit on the per-batch path.
#define DDSTAGE_HIP_CHECK(call)                                                                 \
  do {                                                                                          \
    if (const hipError_t rc_ = (call); rc_ != hipSuccess) fail(#call, rc_, __FILE__, __LINE__); \
  } while (0)

[[noreturn]] void fail(const char* call, hipError_t rc, const char* file, int line) {
  throw Error(ErrorKind::runtime,
              fmt::format("HIP: {} failed: {} ({}): {} [{}:{}]", call, hipGetErrorName(rc),
                          static_cast<int>(rc), hipGetErrorString(rc), file, line));
}

/// hipHostRegister's flag for memory mapped read-only (a store's shared memory), or 0 where
/// this ROCm lacks it: there a PROT_READ mapping cannot be registered (ROCm pins for writing).
constexpr unsigned read_only_flag() {
#ifdef hipHostRegisterReadOnly
  return hipHostRegisterReadOnly;
#else
  return 0;
#endif
}

DeviceProbe probe_once() {
  DeviceProbe probe;
  int count = 0;
  // Without a driver this returns an error (no driver, no device): every
  // error means no device, reported with its name.
  if (const hipError_t rc = hipGetDeviceCount(&count); rc != hipSuccess) {
    probe.reason = fmt::format("hipGetDeviceCount: {} ({}): {}", hipGetErrorName(rc),
                               static_cast<int>(rc), hipGetErrorString(rc));
    return probe;
  }
  if (count <= 0) {
    probe.reason = "hipGetDeviceCount found no device";
    return probe;
  }
  probe.devices = count;
  for (int d = 0; d < count; ++d) {
    hipDeviceProp_t prop{};
    probe.names.push_back(hipGetDeviceProperties(&prop, d) == hipSuccess ? prop.name : "?");
    probe.register_read_only.push_back(read_only_flag() != 0);
  }
  return probe;
}

/// Makes device current for this thread while a call needs it, and restores the caller's
/// when it was known and differs (HIP makes every device ready at initialisation, so setting
/// device 0 back creates nothing).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (hipGetDevice(&m_previous) != hipSuccess) m_previous = -1;
    if (m_previous != device) {
      DDSTAGE_HIP_CHECK(hipSetDevice(device));
      m_changed = true;
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (m_changed && m_previous >= 0) (void)hipSetDevice(m_previous);
  }

 private:
  int m_previous = -1;  // -1: unknown, so not restored
  bool m_changed = false;
};

class HipRuntime final : public DeviceRuntime {
 public:
  MemoryKind kind() const noexcept override { return MemoryKind::hip; }

  const DeviceProbe& probe() const override {
    static const DeviceProbe probe = probe_once();
    return probe;
  }

  std::optional<int> device_of(const void* ptr) const override {
    hipPointerAttribute_t attr{};
    if (hipPointerGetAttributes(&attr, ptr) != hipSuccess) {
      // Not cleared with hipGetLastError: this error is not sticky, and clearing would also
      // drop an error of the caller's own kernels that it has yet to check.
      return std::nullopt;
    }
#if HIP_VERSION_MAJOR >= 6
    // ROCm 6 replaced memoryType by type, with CUDA's enum values (Frontier runs ROCm 6).
    if (attr.type != hipMemoryTypeDevice && !attr.isManaged) return std::nullopt;
#else
    if (attr.memoryType != hipMemoryTypeDevice && !attr.isManaged) return std::nullopt;
#endif
    return attr.device;
  }

  void* allocate_device(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* ptr = nullptr;
    DDSTAGE_HIP_CHECK(hipMalloc(&ptr, bytes));
    return ptr;
  }

  void* allocate_pinned(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* ptr = nullptr;
    DDSTAGE_HIP_CHECK(hipHostMalloc(&ptr, bytes, hipHostMallocDefault));
    return ptr;
  }

  void* create_stream(int device) override {
    DeviceScope scope(device);
    hipStream_t stream = nullptr;
    DDSTAGE_HIP_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
    return stream;
  }

  void* create_event(int device) override {
    DeviceScope scope(device);
    hipEvent_t event = nullptr;
    DDSTAGE_HIP_CHECK(hipEventCreateWithFlags(&event, hipEventDisableTiming));
    return event;
  }

  void* register_host(int device, const void* ptr, std::size_t bytes) noexcept override try {
    DeviceScope scope(device);
    void* address = const_cast<void*>(ptr);
    if (const hipError_t rc =
            hipHostRegister(address, bytes, read_only_flag() | hipHostRegisterPortable);
        rc != hipSuccess) {
      spdlog::info(
          "HIP: hipHostRegister of {} bytes of shared memory failed ({}): direct copies from it "
          "are "
          "staged by the driver",
          bytes, hipGetErrorString(rc));
      return nullptr;
    }
    return address;
  } catch (const Error& e) {
    spdlog::info(
        "HIP: shared memory not registered ({}): direct copies from it are staged by the driver",
        e.what());
    return nullptr;
  }

  void release(DeviceHandleKind kind, void* handle) noexcept override {
    hipError_t rc = hipSuccess;
    switch (kind) {
      case DeviceHandleKind::device_memory:
        rc = hipFree(handle);
        break;
      case DeviceHandleKind::pinned_memory:
        rc = hipHostFree(handle);
        break;
      case DeviceHandleKind::stream:
        rc = hipStreamDestroy(static_cast<hipStream_t>(handle));
        break;
      case DeviceHandleKind::event:
        rc = hipEventDestroy(static_cast<hipEvent_t>(handle));
        break;
      case DeviceHandleKind::host_registration:
        rc = hipHostUnregister(handle);
        break;
    }
    if (rc != hipSuccess) spdlog::warn("HIP: releasing a handle failed: {}", hipGetErrorString(rc));
  }

  void copy_async(int device, void* dst, const void* src, std::size_t bytes,
                  void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_HIP_CHECK(
        hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, static_cast<hipStream_t>(stream)));
  }

  void fill_async(int device, void* dst, unsigned char value, std::size_t bytes,
                  void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_HIP_CHECK(hipMemsetAsync(dst, value, bytes, static_cast<hipStream_t>(stream)));
  }

  void record_and_wait(int device, void* event, void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_HIP_CHECK(
        hipEventRecord(static_cast<hipEvent_t>(event), static_cast<hipStream_t>(stream)));
    DDSTAGE_HIP_CHECK(hipEventSynchronize(static_cast<hipEvent_t>(event)));
  }

  void drain(int device, void* stream) noexcept override try {
    DeviceScope scope(device);
    if (const hipError_t rc = hipStreamSynchronize(static_cast<hipStream_t>(stream));
        rc != hipSuccess) {
      spdlog::warn("HIP: waiting for a failed batch's queued copies: {}", hipGetErrorString(rc));
    }
  } catch (const Error& e) {
    spdlog::warn("HIP: waiting for a failed batch's queued copies: {}", e.what());
  }
};

}  // namespace

DeviceRuntime& hip_runtime() {
  static HipRuntime runtime;
  return runtime;
}

}  // namespace ddstage::detail
