#include "ddstage/tool/device_allocation.hpp"

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "gpu/device_registry.hpp"

namespace ddstage {

struct DeviceAllocation::State {
  State(int device_, std::size_t bytes_)
      : runtime(detail::runtime_with_device(device_)),
        device(device_),
        bytes(bytes_),
        // Declared (and so destroyed) in reverse: the event and stream go before the memory.
        memory(runtime, detail::DeviceHandleKind::device_memory,
               runtime.allocate_device(device_, bytes_)),
        stream(runtime, detail::DeviceHandleKind::stream, runtime.create_stream(device_)),
        event(runtime, detail::DeviceHandleKind::event, runtime.create_event(device_)) {}

  void check(std::size_t n) const {
    if (n > bytes) {
      throw UsageError(fmt::format("{} bytes asked of a device allocation of {}", n, bytes));
    }
  }

  detail::DeviceRuntime& runtime;
  int device;
  std::size_t bytes;
  detail::DeviceHandle memory;
  detail::DeviceHandle stream;
  detail::DeviceHandle event;
};

DeviceAllocation::DeviceAllocation(int device, std::size_t bytes)
    : m(std::make_unique<State>(device, bytes)) {}
DeviceAllocation::DeviceAllocation(DeviceAllocation&&) noexcept = default;
DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&&) noexcept = default;
DeviceAllocation::~DeviceAllocation() = default;

DeviceBuffer DeviceAllocation::buffer() const noexcept {
  return {m->memory.get(), m->bytes, m->device, m->stream.get()};
}

DeviceBuffer DeviceAllocation::buffer(std::size_t bytes) const {
  m->check(bytes);
  return {m->memory.get(), bytes, m->device, m->stream.get()};
}

MemoryKind DeviceAllocation::kind() const noexcept {
  return m->runtime.kind();
}

void DeviceAllocation::copy_to_host(std::span<std::byte> out) const {
  m->check(out.size());
  m->runtime.copy_async(m->device, out.data(), m->memory.get(), out.size(), m->stream.get());
  m->runtime.record_and_wait(m->device, m->event.get(), m->stream.get());
}

void DeviceAllocation::fill(std::byte value, std::size_t bytes) const {
  m->check(bytes);
  m->runtime.fill_async(m->device, m->memory.get(), static_cast<unsigned char>(value), bytes,
                        m->stream.get());
  m->runtime.record_and_wait(m->device, m->event.get(), m->stream.get());
}

}  // namespace ddstage
