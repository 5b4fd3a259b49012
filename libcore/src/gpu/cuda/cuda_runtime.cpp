// DeviceRuntime over the CUDA runtime API (host calls only: no kernels, so no nvcc needed).
#include <cuda_runtime_api.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "gpu/device_runtime.hpp"

namespace ddstage::detail {
namespace {

/// Builds the message only on failure: these calls sit on the per-batch path.
#define DDSTAGE_CUDA_CHECK(call)                                                    \
  do {                                                                              \
    if (const cudaError_t rc_ = (call); rc_ != cudaSuccess) fail(#call, rc_, __FILE__, __LINE__); \
  } while (0)

[[noreturn]] void fail(const char* call, cudaError_t rc, const char* file, int line) {
  throw Error(ErrorKind::runtime, fmt::format("CUDA: {} failed: {} ({}): {} [{}:{}]", call, cudaGetErrorName(rc),
                                              static_cast<int>(rc), cudaGetErrorString(rc), file, line));
}

DeviceProbe probe_once() {
  DeviceProbe probe;
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver and leaves count unset: every
  // error means no device, reported with its name.
  if (const cudaError_t rc = cudaGetDeviceCount(&count); rc != cudaSuccess) {
    probe.reason = fmt::format("cudaGetDeviceCount: {} ({}): {}", cudaGetErrorName(rc), static_cast<int>(rc),
                               cudaGetErrorString(rc));
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
  }
  return probe;
}

/// Makes device current for this thread while a call needs it, and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    DDSTAGE_CUDA_CHECK(cudaGetDevice(&m_previous));
    if (m_previous != device) DDSTAGE_CUDA_CHECK(cudaSetDevice(device));
    m_device = device;
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (m_previous != m_device) (void)cudaSetDevice(m_previous);
  }

 private:
  int m_previous = 0;
  int m_device = 0;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  MemoryKind kind() const noexcept override { return MemoryKind::cuda; }

  DeviceProbe probe() const override {
    static const DeviceProbe probe = probe_once();
    return probe;
  }

  std::optional<int> device_of(const void* ptr) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      (void)cudaGetLastError();  // a host pointer is an answer, not a sticky error
      return std::nullopt;
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return std::nullopt;
    return attr.device;
  }

  void* allocate_device(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* ptr = nullptr;
    DDSTAGE_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
  }

  void* allocate_pinned(std::size_t bytes) override {
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

  void* register_host(const void* ptr, std::size_t bytes) noexcept override {
    void* address = const_cast<void*>(ptr);
    if (const cudaError_t rc = cudaHostRegister(address, bytes, cudaHostRegisterReadOnly | cudaHostRegisterPortable); rc != cudaSuccess) {
      (void)cudaGetLastError();
      spdlog::info("CUDA: cudaHostRegister of {} bytes of shared memory failed ({}): direct copies from it are "
                   "staged by the driver",
                   bytes, cudaGetErrorString(rc));
      return nullptr;
    }
    return address;
  }

  void release(DeviceHandleKind kind, void* handle) noexcept override {
    cudaError_t rc = cudaSuccess;
    switch (kind) {
      case DeviceHandleKind::device_memory: rc = cudaFree(handle); break;
      case DeviceHandleKind::pinned_memory: rc = cudaFreeHost(handle); break;
      case DeviceHandleKind::stream: rc = cudaStreamDestroy(static_cast<cudaStream_t>(handle)); break;
      case DeviceHandleKind::event: rc = cudaEventDestroy(static_cast<cudaEvent_t>(handle)); break;
      case DeviceHandleKind::host_registration: rc = cudaHostUnregister(handle); break;
    }
    if (rc != cudaSuccess) spdlog::warn("CUDA: releasing a handle failed: {}", cudaGetErrorString(rc));
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, void* stream) override {
    DDSTAGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  }

  void fill_async(void* dst, unsigned char value, std::size_t bytes, void* stream) override {
    DDSTAGE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
  }

  void record_and_wait(void* event, void* stream) override {
    DDSTAGE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
    DDSTAGE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
};

}  // namespace

DeviceRuntime& cuda_runtime() {
  static CudaRuntime runtime;
  return runtime;
}

}  // namespace ddstage::detail
