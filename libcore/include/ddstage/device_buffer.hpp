// GPU memory as a get_batch destination: plain values, so that this header (and every public
// one) needs no CUDA or HIP header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ddstage {

/// Where memory lives: host memory, or device memory of the CUDA or HIP runtime.
enum class MemoryKind : uint8_t { host, cuda, hip };

/// "host", "cuda", "hip".
std::string_view memory_kind_name(MemoryKind kind) noexcept;

/// The caller's device memory for one batch. get_batch writes only these bytes (no pool of
/// its own that batches could share), queues its copies on `stream` and returns after one
/// event on that stream completes: work the caller queued on the stream before the call
/// finishes first, and the rows are in place when get_batch returns.
struct DeviceBuffer {
  void* ptr = nullptr;     ///< device memory (cudaMalloc, hipMalloc, ...) on `device`
  std::size_t bytes = 0;   ///< must equal the batch's bytes
  int device = 0;          ///< the device ptr belongs to
  void* stream = nullptr;  ///< the caller's cudaStream_t / hipStream_t; null: the default stream
};

/// The device whose memory ptr is (device or managed memory of a built runtime), for callers
/// holding a pointer without its device number (Python's __cuda_array_interface__). Error
/// "no GPU: <reason>" when no built runtime finds a device; UsageError when ptr is none's.
int device_of(const void* ptr);

}  // namespace ddstage
