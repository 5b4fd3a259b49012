// One RDM endpoint with everything it stands on: fabric, domain, address vector, queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>

#include "fabric/fabric_handles.hpp"

namespace ddstage::detail {

/// fabric + domain + address vector (table) + completion queue (context format) + RDM endpoint,
/// bound and enabled, opened from one fi_info. Not thread-safe (FI_THREAD_DOMAIN): one thread
/// at a time uses it, or the owner serialises. Move-only.
class FabricEndpoint {
 public:
  /// How the completion queue is waited on: polled by its user, or with a wait object (a file
  /// descriptor where the provider offers one) so that a server's progress thread can sleep
  /// until the network has work for it.
  enum class Wait { poll, block };

  /// Opens everything from `info` (an entry choose_provider or find_provider returned). With
  /// Wait::block, a provider whose queue has no wait object gets a polled one (blocking()).
  explicit FabricEndpoint(const fi_info& info, Wait wait = Wait::poll);

  /// The entry it was opened from, as the provider completed it.
  const fi_info& info() const noexcept { return *m_info; }
  const std::string& provider() const noexcept { return m_provider; }
  /// Whether the domain asks for this FI_MR_* mode.
  bool mr_mode(int flag) const noexcept { return (m_info->domain_attr->mr_mode & flag) != 0; }
  /// Whether reads complete only while somebody drives this endpoint's queue.
  bool manual_progress() const noexcept;
  /// Whether the queue has a wait object (fi_cq_sread blocks).
  bool blocking() const noexcept { return m_blocking; }
  /// The queue's wait object as a file descriptor to poll(2) for work (owned by the queue), or
  /// -1 when the provider offers none.
  int wait_fd() const noexcept { return m_wait_fd; }
  /// fi_trywait on the queue: true when the caller may block on wait_fd(), false when work is
  /// already pending (drive the queue first).
  bool try_wait() noexcept;

  /// This endpoint's address (fi_getname), raw bytes, for peers' insert_peer.
  std::string address() const;
  /// Adds a peer's address() to the address vector; returns what reads aim at.
  fi_addr_t insert_peer(std::string_view address);
  /// Registers [buf, buf + len) for `access` (FI_READ, FI_REMOTE_READ), bound to the endpoint
  /// and enabled when the domain has FI_MR_ENDPOINT. `requested_key` is used unless the
  /// provider picks keys (FI_MR_PROV_KEY).
  MrPtr register_memory(const void* buf, std::size_t len, uint64_t access, uint64_t requested_key);

  fid_ep* ep() const noexcept { return m_ep.get(); }
  fid_cq* cq() const noexcept { return m_cq.get(); }

 private:
  void open_cq(Wait wait);

  // Declared in opening order: closed in reverse, endpoint first.
  InfoPtr m_info;
  std::string m_provider;
  FabricPtr m_fabric;
  DomainPtr m_domain;
  AvPtr m_av;
  CqPtr m_cq;
  EndpointPtr m_ep;
  bool m_blocking = false;
  int m_wait_fd = -1;
};

}  // namespace ddstage::detail
