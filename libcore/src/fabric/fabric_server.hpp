// What a server rank runs to let readers fi_read its regions.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_options.hpp"
#include "fabric/fabric_peer.hpp"
#include "fabric/fabric_region.hpp"

namespace ddstage::detail {

/// One endpoint, the regions registered on it (added and removed while serving, as datasets
/// load and unload), and — for providers with manual progress (shm, tcp;ofi_rxm) — a thread that
/// keeps driving the completion queue, without which remote reads never complete. How it waits
/// is options.progress: `sleep` blocks on the queue's wait object, which the provider wakes when
/// the network has work (no cost while idle, a wake-up's latency on every read); `spin` polls
/// (the lowest latency, a busy core beside the training job); `adaptive` sleeps until woken and
/// then polls for options.spin, so a reader's back-to-back reads skip the wake-up. Adaptive needs
/// a wait object it can poll(2) (tcp;ofi_rxm has one); with only fi_cq_sread it sleeps. Providers
/// without wait objects (shm) are polled in every mode. Methods may be called from any one
/// thread at a time.
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
  /// The endpoint's IP address, numeric, for providers that name endpoints by socket address
  /// (tcp, net, udp); empty for the others (shm, cxi, verbs).
  std::string ip_address() const;
  /// Registers `memory` (which must outlive its registration) and returns its id.
  uint64_t add_region(std::span<const std::byte> memory);
  /// Key, base and length of a region add_region returned.
  FabricRegionInfo region(uint64_t id) const;
  /// Deregisters a region; reads aimed at it afterwards fail at the reader.
  void remove_region(uint64_t id);

 private:
  void progress(std::stop_token stop);
  /// Blocks on the wait descriptor (bounded); true when the network woke it or work was pending.
  bool wait_for_work();
  /// One fi_cq_read, or with `block` one bounded fi_cq_sread.
  void drive_queue(bool block);
  /// The endpoint's lock, taken ahead of the progress thread.
  std::unique_lock<std::mutex> lock_out_progress() const;

  FabricEndpoint m_endpoint;
  std::string m_address;
  mutable std::atomic<int> m_waiting{0};  // callers waiting for m_mutex
  bool m_blocking = false;                // the queue has a wait object progress can sleep on
  bool m_poll_fd = false;                 // ... and it is a descriptor progress polls
  FabricProgress m_mode;
  std::chrono::milliseconds m_spin;
  mutable std::mutex m_mutex;  // the endpoint's domain is FI_THREAD_DOMAIN: one caller at a time
  std::map<uint64_t, FabricRegion> m_regions;
  uint64_t m_next_id = 1;
  std::jthread m_progress;  // last: stopped and joined before the regions and endpoint close
};

/// A region registered on a FabricServer for as long as this object lives: declare it after the
/// memory it registers, so the registration goes first. Move-only.
class FabricRegistration {
 public:
  FabricRegistration(FabricServer& server, std::span<const std::byte> memory)
      : m_server(&server), m_id(server.add_region(memory)) {}
  FabricRegistration(FabricRegistration&& other) noexcept
      : m_server(std::exchange(other.m_server, nullptr)), m_id(other.m_id) {}
  FabricRegistration& operator=(FabricRegistration&& other) noexcept {
    if (this != &other) {
      reset();
      m_server = std::exchange(other.m_server, nullptr);
      m_id = other.m_id;
    }
    return *this;
  }
  ~FabricRegistration() { reset(); }

  FabricRegionInfo info() const { return m_server->region(m_id); }

 private:
  void reset() noexcept {
    if (auto* server = std::exchange(m_server, nullptr)) server->remove_region(m_id);
  }
  FabricServer* m_server = nullptr;
  uint64_t m_id = 0;
};

}  // namespace ddstage::detail
