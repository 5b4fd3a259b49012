// What a reader adds to get_batch for a device destination: the gpu.path choice, a pinned
// bounce buffer, the copies to the caller's memory and the one event wait per batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/device_buffer.hpp"
#include "ddstage/tool/gpu_info.hpp"
#include "gpu/device_runtime.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// One per Reader (so per thread): its bounce buffer and events serve only that reader's
/// batches, one batch at a time, and every batch writes only the caller's DeviceBuffer. A
/// batch ends with its copies complete, so the bounce buffer is free for the next one.
class GpuDestination {
 public:
  /// setting: the `gpu.path` value, direct, staged or auto.
  explicit GpuDestination(std::string setting);
  GpuDestination(const GpuDestination&) = delete;
  GpuDestination& operator=(const GpuDestination&) = delete;
  /// Releases the reader's share of the regions' registrations.
  ~GpuDestination();

  /// Before anything is read: Error "no GPU: <reason>" when no runtime has dest.device,
  /// UsageError when dest.ptr is not its device memory (null is fine when need is 0) or
  /// dest.bytes is not `need`.
  void begin(const DeviceBuffer& dest, uint64_t need);
  /// The path of this batch. why_not_direct is empty when its rows can go straight to device
  /// memory; otherwise gpu.path=direct is a UsageError naming it and auto stages (saying so).
  GpuPath choose(std::string_view why_not_direct);
  /// Pinned host memory for bytes, grown as needed and reused. *replaced (when given) says
  /// whether a buffer was freed since the last call that asked (copy_back may grow it too):
  /// transports that cache registrations of destinations must then forget them.
  std::span<std::byte> bounce(uint64_t bytes, bool* replaced = nullptr);
  /// Staged: the bounce buffer's first dest.bytes go to dest in one async copy, then the sync.
  void finish_staged(const DeviceBuffer& dest);
  /// Direct: each read goes from regions[rank] + offset to its dest (an address in dest) as
  /// one async copy on dest.stream, then the sync. The first direct batch page-locks the
  /// regions (shared with the process's other readers), so the copies are DMA.
  void copy_direct(std::span<const ReadOp> reads,
                   std::span<const std::span<const std::byte>> regions, const DeviceBuffer& dest);
  /// dest's bytes back in the bounce buffer, for verify after a direct batch.
  std::span<const std::byte> copy_back(const DeviceBuffer& dest);

 private:
  /// Records an event on dest.stream and waits for it: the batch's only synchronisation.
  void sync(const DeviceBuffer& dest);
  /// Runs queue, and when it throws waits for what it queued on dest.stream before rethrowing:
  /// no copy of a failed batch lands after get_batch has thrown. (A template, not a
  /// std::function: the batch path allocates nothing.)
  template <class Queue>
  void drained_on_failure(const DeviceBuffer& dest, Queue&& queue);
  /// The auto choice: bench's cached answer for this node, else staged (once per reader).
  GpuPath resolve_auto();
  void note(GpuPath path, std::string_view why);

  std::string m_setting;
  DeviceRuntime* m_runtime = nullptr;  // of the current batch's destination
  int m_device = 0;                    // of the current batch's destination
  std::optional<GpuPath> m_auto;
  std::optional<GpuPath> m_last;  // for one log line per change of path
  DeviceRuntime* m_bounce_runtime = nullptr;
  DeviceHandle m_bounce;
  std::size_t m_bounce_bytes = 0;
  bool m_bounce_replaced = false;      // a buffer was freed since bounce() last reported one
  std::vector<DeviceHandle> m_events;  // by device, created on first use
  bool m_regions_registered = false;
  std::vector<const std::byte*> m_registered;  // regions this reader holds registrations of
};

}  // namespace ddstage::detail
