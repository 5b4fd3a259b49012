// DeviceRuntime over the CUDA runtime API (host calls only: no kernels, so no nvcc needed).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "gpu/device_runtime.hpp"

namespace ddstage::detail {
namespace {

/// Builds the message only on failure: these calls sit on the per-batch path.
#define DDSTAGE_CUDA_CHECK(call)                                                                  \
  do {                                                                                            \
    if (const cudaError_t rc_ = (call); rc_ != cudaSuccess) fail(#call, rc_, __FILE__, __LINE__); \
  } while (0)

[[noreturn]] void fail(const char* call, cudaError_t rc, const char* file, int line) {
  throw Error(ErrorKind::runtime,
              fmt::format("CUDA: {} failed: {} ({}): {} [{}:{}]", call, cudaGetErrorName(rc),
                          static_cast<int>(rc), cudaGetErrorString(rc), file, line));
}

DeviceProbe probe_once() {
  DeviceProbe probe;
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver and leaves count unset: every
  // error means no device, reported with its name.
  if (const cudaError_t rc = cudaGetDeviceCount(&count); rc != cudaSuccess) {
    probe.reason = fmt::format("cudaGetDeviceCount: {} ({}): {}", cudaGetErrorName(rc),
                               static_cast<int>(rc), cudaGetErrorString(rc));
    return probe;
  }
  if (count <= 0) {
    probe.reason = "cudaGetDeviceCount found no device";
    return probe;
  }
  probe.devices = count;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    probe.names.push_back(cudaGetDeviceProperties(&prop, d) == cudaSuccess ? prop.name : "?");
    int read_only = 0;
    probe.register_read_only.push_back(
        cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, d) ==
            cudaSuccess &&
        read_only);
  }
  return probe;
}

/// cuCtxGetCurrent and cuCtxSetCurrent, reached through the runtime: linking libcuda would
/// stop ddstage from loading on a host without a driver. Null when the driver lacks them.
struct DriverContextCalls {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
};

const DriverContextCalls& driver_context_calls() {
  static const DriverContextCalls calls = [] {
    DriverContextCalls out;
    void* get = nullptr;
    void* set = nullptr;
    cudaDriverEntryPointQueryResult got_get{};
    cudaDriverEntryPointQueryResult got_set{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                         &got_get) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                         &got_set) == cudaSuccess &&
        got_get == cudaDriverEntryPointSuccess && got_set == cudaDriverEntryPointSuccess) {
      out.get = reinterpret_cast<CUresult (*)(CUcontext*)>(get);
      out.set = reinterpret_cast<CUresult (*)(CUcontext)>(set);
    }
    return out;
  }();
  return calls;
}

/// Makes device current for this thread while a call needs it, and restores the caller's.
/// A thread without a context (cudaGetDevice answers 0 there too) is left without one:
/// making device 0 current again would create its context, memory on a GPU this process
/// may never use.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    const DriverContextCalls& driver = driver_context_calls();
    CUcontext current = nullptr;
    m_had_context = !driver.get || (driver.get(&current) == CUDA_SUCCESS && current != nullptr);
    if (m_had_context && cudaGetDevice(&m_previous) != cudaSuccess) m_previous = -1;
    if (m_previous != device) {
      DDSTAGE_CUDA_CHECK(cudaSetDevice(device));
      m_changed = true;
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (!m_changed) return;
    if (!m_had_context) {
      (void)driver_context_calls().set(nullptr);
    } else if (m_previous >= 0) {
      (void)cudaSetDevice(m_previous);
    }
  }

 private:
  int m_previous = -1;  // -1: unknown, so not restored
  bool m_had_context = true;
  bool m_changed = false;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  MemoryKind kind() const noexcept override { return MemoryKind::cuda; }

  const DeviceProbe& probe() const override {
    static const DeviceProbe probe = probe_once();
    return probe;
  }

  std::optional<int> device_of(const void* ptr) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      // Not cleared with cudaGetLastError: this error is not sticky, and clearing would also
      // drop an error of the caller's own kernels that it has yet to check.
      return std::nullopt;
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      return std::nullopt;
    return attr.device;
  }

  void* allocate_device(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* ptr = nullptr;
    DDSTAGE_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
  }

  void* allocate_pinned(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* ptr = nullptr;
    DDSTAGE_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
    return ptr;
  }

  void* create_stream(int device) override {
    DeviceScope scope(device);
    cudaStream_t stream = nullptr;
    DDSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }

  void* create_event(int device) override {
    DeviceScope scope(device);
    cudaEvent_t event = nullptr;
    DDSTAGE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  void* register_host(int device, const void* ptr, std::size_t bytes) noexcept override try {
    if (!probe().register_read_only[static_cast<std::size_t>(device)]) {
      spdlog::info(
          "CUDA: device {} cannot page-lock read-only memory "
          "(cudaDevAttrHostRegisterReadOnlySupported is "
          "0): direct copies from shared memory are staged by the driver",
          device);
      return nullptr;
    }
    DeviceScope scope(device);
    void* address = const_cast<void*>(ptr);
    if (const cudaError_t rc =
            cudaHostRegister(address, bytes, cudaHostRegisterReadOnly | cudaHostRegisterPortable);
        rc != cudaSuccess) {
      spdlog::info(
          "CUDA: cudaHostRegister of {} bytes of shared memory failed ({}): direct copies from it "
          "are "
          "staged by the driver",
          bytes, cudaGetErrorString(rc));
      return nullptr;
    }
    return address;
  } catch (const Error& e) {
    spdlog::info(
        "CUDA: shared memory not registered ({}): direct copies from it are staged by the driver",
        e.what());
    return nullptr;
  }

  void release(DeviceHandleKind kind, void* handle) noexcept override {
    cudaError_t rc = cudaSuccess;
    switch (kind) {
      case DeviceHandleKind::device_memory:
        rc = cudaFree(handle);
        break;
      case DeviceHandleKind::pinned_memory:
        rc = cudaFreeHost(handle);
        break;
      case DeviceHandleKind::stream:
        rc = cudaStreamDestroy(static_cast<cudaStream_t>(handle));
        break;
      case DeviceHandleKind::event:
        rc = cudaEventDestroy(static_cast<cudaEvent_t>(handle));
        break;
      case DeviceHandleKind::host_registration:
        rc = cudaHostUnregister(handle);
        break;
    }
    if (rc != cudaSuccess)
      spdlog::warn("CUDA: releasing a handle failed: {}", cudaGetErrorString(rc));
  }

  void copy_async(int device, void* dst, const void* src, std::size_t bytes,
                  void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  }

  void fill_async(int device, void* dst, unsigned char value, std::size_t bytes,
                  void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
  }

  void record_and_wait(int device, void* event, void* stream) override {
    DeviceScope scope(device);
    DDSTAGE_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
    DDSTAGE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }

  void drain(int device, void* stream) noexcept override try {
    DeviceScope scope(device);
    if (const cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
        rc != cudaSuccess) {
      spdlog::warn("CUDA: waiting for a failed batch's queued copies: {}", cudaGetErrorString(rc));
    }
  } catch (const Error& e) {
    spdlog::warn("CUDA: waiting for a failed batch's queued copies: {}", e.what());
  }
};

}  // namespace

DeviceRuntime& cuda_runtime() {
  static CudaRuntime runtime;
  return runtime;
}

}  // namespace ddstage::detail
