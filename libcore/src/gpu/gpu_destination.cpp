#include "gpu/gpu_destination.hpp"

#include <bit>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "batch_timer.hpp"
#include "ddstage/error.hpp"
#include "gpu/device_registry.hpp"
#include "gpu/host_registrations.hpp"

namespace ddstage::detail {

GpuDestination::GpuDestination(std::string setting) : m_setting(std::move(setting)) {}

GpuDestination::~GpuDestination() {
  for (const std::byte* region : m_registered) HostRegistrations::instance().release(region);
}

void GpuDestination::begin(const DeviceBuffer& dest, uint64_t need) {
  // An empty batch may come without memory, as on the host path: there is no pointer to ask about.
  DeviceRuntime& runtime =
      need == 0 && dest.ptr == nullptr ? runtime_with_device(dest.device) : runtime_of(dest);
  if (&runtime != m_runtime) {
    m_events.clear();  // events belong to the runtime that made them
    m_runtime = &runtime;
  }
  m_device = dest.device;
  if (dest.bytes != need) {
    throw UsageError(
        fmt::format("device destination holds {} bytes; the batch needs {}", dest.bytes, need));
  }
}

GpuPath GpuDestination::choose(std::string_view why_not_direct) {
  if (m_setting == "staged") {
    note(GpuPath::staged, "gpu.path=staged");
    return GpuPath::staged;
  }
  if (m_setting == "direct") {
    if (!why_not_direct.empty()) {
      throw UsageError(
          fmt::format("gpu.path=direct: {}; use gpu.path=staged or auto", why_not_direct));
    }
    note(GpuPath::direct, "gpu.path=direct");
    return GpuPath::direct;
  }
  const GpuPath cached = resolve_auto();
  if (cached == GpuPath::direct && !why_not_direct.empty()) {
    if (m_last != GpuPath::staged) {
      spdlog::info(
          "gpu.path=auto: this node's faster path is direct, but {}: staging through host memory",
          why_not_direct);
    }
    note(GpuPath::staged, "gpu.path=auto, falling back");
    return GpuPath::staged;
  }
  note(cached, "gpu.path=auto");
  return cached;
}

GpuPath GpuDestination::resolve_auto() {
  if (!m_auto) {
    const auto cached = cached_gpu_path();
    m_auto = cached.value_or(GpuPath::staged);
    spdlog::debug("gpu.path=auto: {} ({} {})", gpu_path_name(*m_auto),
                  cached ? "as bench measured, cached in" : "no bench result in",
                  gpu_path_cache_file().string());
  }
  return *m_auto;
}

void GpuDestination::note(GpuPath path, std::string_view why) {
  if (m_last == path) return;
  m_last = path;
  spdlog::debug("GPU batches go {} ({})", gpu_path_name(path), why);
}

std::span<std::byte> GpuDestination::bounce(uint64_t bytes, bool* replaced) {
  if (bytes > m_bounce_bytes || m_bounce_runtime != m_runtime) {
    if (m_bounce) m_bounce_replaced = true;
    // Forgotten before allocating: when that throws, the next batch must allocate again, not
    // get the freed buffer's null with the old size.
    m_bounce = DeviceHandle();
    m_bounce_bytes = 0;
    m_bounce_runtime = nullptr;
    // Powers of two: a reader whose batches grow a little reallocates a few times, not each time.
    const std::size_t size = std::bit_ceil(std::max<std::size_t>(bytes, 1));
    m_bounce = DeviceHandle(*m_runtime, DeviceHandleKind::pinned_memory,
                            m_runtime->allocate_pinned(m_device, size));
    m_bounce_bytes = size;
    m_bounce_runtime = m_runtime;
  }
  if (replaced) {
    *replaced = m_bounce_replaced;
    m_bounce_replaced = false;
  }
  return {static_cast<std::byte*>(m_bounce.get()), bytes};
}

template <class Queue>
void GpuDestination::drained_on_failure(const DeviceBuffer& dest, Queue&& queue) {
  try {
    queue();
  } catch (...) {
    m_runtime->drain(dest.device, dest.stream);
    throw;
  }
}

void GpuDestination::finish_staged(const DeviceBuffer& dest) {
  drained_on_failure(dest, [&] {
    if (dest.bytes > 0)
      m_runtime->copy_async(dest.device, dest.ptr, m_bounce.get(), dest.bytes, dest.stream);
    sync(dest);
  });
}

void GpuDestination::copy_direct(std::span<const ReadOp> reads,
                                 std::span<const std::span<const std::byte>> regions,
                                 const DeviceBuffer& dest) {
  if (!m_regions_registered) {
    m_regions_registered = true;
    for (const auto& region : regions) {
      if (region.empty()) continue;
      HostRegistrations::instance().acquire(*m_runtime, dest.device, region);
      m_registered.push_back(region.data());
    }
    profile_mark(ProfileStage::registration);
  }
  drained_on_failure(dest, [&] {
    for (const ReadOp& op : reads) {
      m_runtime->copy_async(dest.device, op.dest,
                            regions[static_cast<std::size_t>(op.target)].data() + op.offset,
                            op.bytes, dest.stream);
    }
    profile_mark(ProfileStage::copy);
    sync(dest);
  });
}

std::span<const std::byte> GpuDestination::copy_back(const DeviceBuffer& dest) {
  const auto host = bounce(dest.bytes);
  drained_on_failure(dest, [&] {
    if (dest.bytes > 0)
      m_runtime->copy_async(dest.device, host.data(), dest.ptr, dest.bytes, dest.stream);
    sync(dest);
  });
  return host;
}

void GpuDestination::sync(const DeviceBuffer& dest) {
  const auto device = static_cast<std::size_t>(dest.device);
  if (m_events.size() <= device) m_events.resize(device + 1);
  if (!m_events[device]) {
    m_events[device] =
        DeviceHandle(*m_runtime, DeviceHandleKind::event, m_runtime->create_event(dest.device));
  }
  m_runtime->record_and_wait(dest.device, m_events[device].get(), dest.stream);
  profile_mark(ProfileStage::gpu_sync);
}

}  // namespace ddstage::detail
