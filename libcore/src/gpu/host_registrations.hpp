// Page-locked registrations of mapped store regions, shared by every reader of the process.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <span>

#include "gpu/device_runtime.hpp"

namespace ddstage::detail {

/// The runtimes refuse to register the same pages twice, and the readers of one dataset, on
/// many threads, share its mappings: one registration per region, counted per reader and
/// released with the last one (which runs before the region is unmapped: readers hold it).
class HostRegistrations {
 public:
  static HostRegistrations& instance();

  /// Registers region with runtime (portable: for every device, though made on `device`)
  /// unless it already is; a refusal is remembered too, so it is tried (and logged) once.
  void acquire(DeviceRuntime& runtime, int device, std::span<const std::byte> region);
  void release(const std::byte* region) noexcept;

 private:
  struct Entry {
    DeviceHandle registration;  // empty when the runtime refused
    int users = 0;
  };
  std::mutex m_mutex;
  std::map<const std::byte*, Entry> m_entries;
};

}  // namespace ddstage::detail
