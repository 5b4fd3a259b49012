#include "gpu/host_registrations.hpp"

namespace ddstage::detail {

HostRegistrations& HostRegistrations::instance() {
  static HostRegistrations registrations;
  return registrations;
}

void HostRegistrations::acquire(DeviceRuntime& runtime, int device,
                                std::span<const std::byte> region) {
  std::lock_guard lock(m_mutex);
  Entry& entry = m_entries[region.data()];
  if (entry.users++ == 0) {
    void* handle = runtime.register_host(device, region.data(), region.size());
    if (handle)
      entry.registration = DeviceHandle(runtime, DeviceHandleKind::host_registration, handle);
  }
}

void HostRegistrations::release(const std::byte* region) noexcept {
  std::lock_guard lock(m_mutex);
  const auto it = m_entries.find(region);
  if (it != m_entries.end() && --it->second.users == 0) m_entries.erase(it);
}

}  // namespace ddstage::detail
