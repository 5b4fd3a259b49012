// The small device interface libcore's GPU destinations use: one implementation per runtime
// (cuda/, hip/), chosen at run time through device_registry.hpp. Handles travel as void* so
// that nothing outside those folders includes a CUDA or HIP header.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ddstage/device_buffer.hpp"

namespace ddstage::detail {

/// What a runtime finds on this node: devices, or why there are none.
struct DeviceProbe {
  int devices = 0;
  std::string reason;  // empty when devices > 0
  std::vector<std::string> names;
  std::vector<bool> register_read_only;  // by device: can page-lock memory mapped read-only
};

enum class DeviceHandleKind : unsigned char {
  device_memory,
  pinned_memory,
  stream,
  event,
  host_registration
};

/// One GPU runtime (CUDA, HIP). Calls that fail throw Error naming the runtime call, its code
/// and its string; release() only logs. Nothing here synchronises a whole device. Calls that
/// take a device make it current for their duration and restore the caller's: a reader's
/// thread may have another device current, or none, and the handles must meet on their own.
class DeviceRuntime {
 public:
  DeviceRuntime() = default;
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;
  virtual ~DeviceRuntime() = default;

  virtual MemoryKind kind() const noexcept = 0;
  /// Devices on this node; any runtime error (no driver, no device) means none, with its reason.
  /// Probed once: the reference stays valid (the registry asks twice per batch).
  virtual const DeviceProbe& probe() const = 0;
  /// The device ptr is memory of, when it is this runtime's device (or managed) memory.
  virtual std::optional<int> device_of(const void* ptr) const = 0;

  virtual void* allocate_device(int device, std::size_t bytes) = 0;
  /// Page-locked host memory: the source of one async copy per staged batch.
  virtual void* allocate_pinned(int device, std::size_t bytes) = 0;
  virtual void* create_stream(int device) = 0;
  /// An event without timing, for record + wait.
  virtual void* create_event(int device) = 0;
  /// Page-locks host memory this process maps (a store's shared memory, possibly read-only),
  /// so that device copies from it are DMA rather than staged by the driver. Returns the
  /// handle to release, or null, logged at info level, when the runtime refuses: copies then
  /// still work, staged by the driver.
  virtual void* register_host(int device, const void* ptr, std::size_t bytes) noexcept = 0;
  virtual void release(DeviceHandleKind kind, void* handle) noexcept = 0;

  /// Queues a copy between any two of host and device memory on stream, a stream of device.
  virtual void copy_async(int device, void* dst, const void* src, std::size_t bytes,
                          void* stream) = 0;
  /// Queues a byte fill of device memory on stream, a stream of device.
  virtual void fill_async(int device, void* dst, unsigned char value, std::size_t bytes,
                          void* stream) = 0;
  /// Records event on stream (both of device) and waits for it: the one synchronisation per batch.
  virtual void record_and_wait(int device, void* event, void* stream) = 0;
  /// Waits for what stream (of device) has queued, logging a failure: after a batch's call
  /// threw, so that none of its copies lands after get_batch has returned.
  virtual void drain(int device, void* stream) noexcept = 0;
};

/// A runtime handle that releases itself: move-only, noexcept destructor.
class DeviceHandle {
 public:
  DeviceHandle() = default;
  DeviceHandle(DeviceRuntime& runtime, DeviceHandleKind kind, void* handle) noexcept
      : m_runtime(&runtime), m_kind(kind), m_handle(handle) {}
  DeviceHandle(DeviceHandle&& other) noexcept { swap(other); }
  DeviceHandle& operator=(DeviceHandle&& other) noexcept {
    DeviceHandle(std::move(other)).swap(*this);
    return *this;
  }
  ~DeviceHandle() {
    if (m_handle) m_runtime->release(m_kind, m_handle);
  }

  void* get() const noexcept { return m_handle; }
  explicit operator bool() const noexcept { return m_handle != nullptr; }

 private:
  void swap(DeviceHandle& other) noexcept {
    std::swap(m_runtime, other.m_runtime);
    std::swap(m_kind, other.m_kind);
    std::swap(m_handle, other.m_handle);
  }
  DeviceRuntime* m_runtime = nullptr;
  DeviceHandleKind m_kind = DeviceHandleKind::device_memory;
  void* m_handle = nullptr;
};

/// The runtime implementations; each is defined only when its toolkit was found, and only
/// device_registry.cpp refers to them.
DeviceRuntime& cuda_runtime();
DeviceRuntime& hip_runtime();

}  // namespace ddstage::detail
