// The floor for fabric reads: raw fi_read in a loop against one registered region, with none of
// get_batch's planning, checks or copies in between. `bench fabric-raw` reports it, and `bench
// store` puts fabric cells next to it. No libfabric header here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ddstage/latency_histogram.hpp"
#include "ddstage/settings.hpp"

namespace ddstage {

/// A region registered for remote reads on its own endpoint (with the progress thread the
/// provider needs): what the floor reads, from this process (loopback) or from another one.
class FabricFloorTarget {
 public:
  /// bytes of memory on an endpoint of fabric.provider in fabric.domain. UsageError when the
  /// provider is absent or this ddstage was built without libfabric.
  FabricFloorTarget(const Settings& settings, uint64_t bytes);
  FabricFloorTarget(FabricFloorTarget&&) noexcept;
  FabricFloorTarget& operator=(FabricFloorTarget&&) noexcept;
  ~FabricFloorTarget();

  /// Provider, endpoint address, key, base and length as one line, for a FabricFloorReader
  /// here or in another process.
  std::string address() const;

 private:
  struct State;
  std::unique_ptr<State> m;
};

/// A target's address as FabricFloorReader takes it: provider, endpoint address (hex), key,
/// base and length of a registered region, e.g. one a served store publishes in store.yaml.
inline std::string fabric_floor_address(const std::string& provider, const std::string& address_hex,
                                        uint64_t key, uint64_t base, uint64_t bytes) {
  return provider + ' ' + address_hex + ' ' + std::to_string(key) + ' ' + std::to_string(base) +
         ' ' + std::to_string(bytes);
}

/// What one timed run measured.
struct FabricFloorRun {
  uint64_t rows = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  /// Per call: its time over its reads, in nanoseconds.
  LatencyHistogram ns_per_row;
};

/// fi_read from a target: calls of `batch` reads of row_bytes at random row-aligned offsets,
/// keeping up to fabric.window reads and fabric.inflight_bytes in flight (what get_batch keeps),
/// each call ending when all its reads completed. One thread at a time.
class FabricFloorReader {
 public:
  /// Opens an endpoint of the target's provider in fabric.domain and reaches the target.
  FabricFloorReader(const Settings& settings, const std::string& target_address);
  FabricFloorReader(FabricFloorReader&&) noexcept;
  FabricFloorReader& operator=(FabricFloorReader&&) noexcept;
  ~FabricFloorReader();

  /// The provider the reads go over ("tcp;ofi_rxm").
  const std::string& provider() const noexcept;
  /// rows reads in calls of batch; row_bytes must fit the target. A read failing, or none
  /// taken or completing for read_timeout (an unreachable target), is an Error.
  FabricFloorRun run(uint64_t row_bytes, uint64_t rows, uint64_t batch, uint64_t seed);

 private:
  struct State;
  std::unique_ptr<State> m;
};

}  // namespace ddstage
