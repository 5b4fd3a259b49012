// Device memory with a stream of its own, for tools, benches and tests that need a
// DeviceBuffer without linking CUDA or HIP themselves.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "ddstage/device_buffer.hpp"

namespace ddstage {

/// `bytes` of device memory on `device` of the first built runtime that has that device, and
/// a stream created for it. Move-only; freed (after its stream drains) on destruction.
class DeviceAllocation {
 public:
  /// Error "no GPU: <reason>" when no built runtime has `device` (or none is built).
  DeviceAllocation(int device, std::size_t bytes);
  DeviceAllocation(DeviceAllocation&&) noexcept;
  DeviceAllocation& operator=(DeviceAllocation&&) noexcept;
  ~DeviceAllocation();

  /// The whole allocation with its stream, as a get_batch destination.
  DeviceBuffer buffer() const noexcept;
  /// The first bytes as a destination (a batch smaller than the allocation).
  DeviceBuffer buffer(std::size_t bytes) const;
  MemoryKind kind() const noexcept;
  /// Copies the first out.size() bytes to host memory; returns when they are there.
  void copy_to_host(std::span<std::byte> out) const;
  /// Fills the first bytes with `value` (tests: a row never written shows).
  void fill(std::byte value, std::size_t bytes) const;

 private:
  struct State;
  std::unique_ptr<State> m;
};

}  // namespace ddstage
