// The fabric.* and read_timeout settings as one value the fabric classes take.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ddstage/settings.hpp"

namespace ddstage::detail {

/// How a server's progress thread waits for remote reads (fabric.progress).
enum class FabricProgress {
  adaptive,  ///< spins for `spin` after the network woke it, sleeps on the wait object otherwise
  sleep,     ///< always sleeps on the wait object: no idle cost, a wake-up on every read
  spin,      ///< always polls: the lowest latency, a core per server rank
};

struct FabricOptions {
  std::string provider = "auto";  ///< "auto" or a provider name (fabric.provider)
  std::string domain;             ///< domain / interface name, empty: the provider's first
  std::size_t window = 128;       ///< reads in flight per reader
  /// Bytes in flight per reader: many large reads at once queue up in the provider and run
  /// slower than a few (tcp;ofi_rxm here: 1.6 GB/s with 128 MiB in flight, 3 GB/s with 2 MiB).
  uint64_t max_bytes_in_flight = 4u << 20;
  std::chrono::milliseconds read_timeout{
      10000};  ///< a batch fails after this long without progress
  /// Caps one read below the provider's max_msg_size (0: the provider's limit alone). Larger
  /// rows are split either way.
  uint64_t max_read_bytes = 0;
  FabricProgress progress = FabricProgress::adaptive;
  /// How long an adaptive progress thread keeps polling after the network woke it: back-to-back
  /// reads (a reader's next batch follows within microseconds) then skip the wake-up, while a
  /// store nobody reads sleeps. 1 ms covers a reader's loop and keeps a rank read once per
  /// training step (tens of ms) under a few percent of a core.
  std::chrono::milliseconds spin{1};
  /// Endpoints this process may leave open after time-outs (see FabricTransport) before a
  /// transport refuses to open another.
  std::size_t max_abandoned_endpoints = 16;

  /// From fabric.provider, fabric.domain, fabric.window, fabric.inflight_bytes, fabric.progress,
  /// fabric.spin and read_timeout; a window below 1 is a UsageError.
  static FabricOptions from(const Settings& settings);
};

}  // namespace ddstage::detail
