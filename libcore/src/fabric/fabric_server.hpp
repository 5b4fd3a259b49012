// What a server rank runs to let readers fi_read its regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_options.hpp"
#include "fabric/fabric_peer.hpp"
#include "fabric/fabric_region.hpp"

namespace ddstage::detail {

/// One endpoint, the regions registered on it (added and removed while serving, as datasets
/// load and unload), and — for providers with manual progress (shm, tcp;ofi_rxm) — a thread that
/// keeps driving the completion queue, without which remote reads never complete. The thread
/// polls without sleeping (a sleep would add its length to every read), so it keeps one core
/// busy while the server lives. Methods may be called from any one thread at a time.
class FabricServer {
 public:
  /// Opens an endpoint on the provider and domain `options` choose (choose_provider).
  explicit FabricServer(const FabricOptions& options);
  /// Stops the progress thread, then closes the regions and the endpoint.
  ~FabricServer();
  FabricServer(const FabricServer&) = delete;
  FabricServer& operator=(const FabricServer&) = delete;

  /// Provider and endpoint address, for readers.
  FabricPeer peer() const;
  /// Registers `memory` (which must outlive its registration) and returns its id.
  uint64_t add_region(std::span<const std::byte> memory);
  /// Key, base and length of a region add_region returned.
  FabricRegionInfo region(uint64_t id) const;
  /// Deregisters a region; reads aimed at it afterwards fail at the reader.
  void remove_region(uint64_t id);

 private:
  void progress(std::stop_token stop);

  FabricEndpoint m_endpoint;
  std::string m_address;
  mutable std::mutex m_mutex;  // the endpoint's domain is FI_THREAD_DOMAIN: one caller at a time
  std::map<uint64_t, FabricRegion> m_regions;
  uint64_t m_next_id = 1;
  std::jthread m_progress;  // last: stopped and joined before the regions and endpoint close
};

}  // namespace ddstage::detail
