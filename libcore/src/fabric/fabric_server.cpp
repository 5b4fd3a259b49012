#include "fabric/fabric_server.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <poll.h>

#include <spdlog/spdlog.h>

#include "fabric/fabric_provider.hpp"
#include "loopback.hpp"

namespace ddstage::detail {
namespace {

/// How long the progress thread sleeps in fi_cq_sread at most: what a stop or a registration
/// (load, unload) may wait for the endpoint's lock.
constexpr int sread_timeout_ms = 50;

}  // namespace

FabricServer::FabricServer(const FabricOptions& options)
    : m_endpoint(*choose_provider(options.provider, options.domain), FabricEndpoint::Wait::block),
      m_address(m_endpoint.address()),
      m_mode(options.progress),
      m_spin(options.spin) {
  // shm 1.17's fi_cq_sread returned at once here, so the thread spun holding the lock and
  // starved registrations (a load hung): shm is polled.
  m_blocking = m_endpoint.blocking() && m_endpoint.provider() != "shm";
  m_poll_fd = m_blocking && m_endpoint.wait_fd() >= 0;
  if (m_endpoint.manual_progress() && !m_blocking) {
    spdlog::warn(
        "fabric server ({}): no usable wait object on the completion queue; its progress "
        "thread polls and keeps a core busy",
        m_endpoint.provider());
  }
  // Also when the provider claims automatic progress but the thread costs nothing (it sleeps):
  // fi_efa(7) says efa reports automatic progress and yet needs its queue driven.
  if (m_endpoint.manual_progress() || m_blocking) {
    m_progress = std::jthread([this](std::stop_token stop) { progress(stop); });
  }
}

FabricServer::~FabricServer() {
  if (m_progress.joinable()) {
    m_progress.request_stop();
    m_progress.join();
  }
}

FabricPeer FabricServer::peer() const {
  return {m_endpoint.provider(), to_hex(m_address)};
}

std::string FabricServer::ip_address() const {
  const auto format = m_endpoint.info().addr_format;
  const bool sockaddr_format =
      format == FI_SOCKADDR || format == FI_SOCKADDR_IN || format == FI_SOCKADDR_IN6;
  if (!sockaddr_format || m_address.size() < sizeof(sockaddr)) return {};
  sockaddr_storage addr{};
  std::memcpy(&addr, m_address.data(), std::min(m_address.size(), sizeof addr));
  return numeric_host(reinterpret_cast<const sockaddr&>(addr));
}

uint64_t FabricServer::add_region(std::span<const std::byte> memory) {
  const auto lock = lock_out_progress();
  const uint64_t id = m_next_id++;
  m_regions.emplace(id, FabricRegion(m_endpoint, memory));
  return id;
}

FabricRegionInfo FabricServer::region(uint64_t id) const {
  const auto lock = lock_out_progress();
  auto it = m_regions.find(id);
  if (it == m_regions.end()) throw std::logic_error("no fabric region " + std::to_string(id));
  return it->second.info();
}

void FabricServer::remove_region(uint64_t id) {
  const auto lock = lock_out_progress();
  m_regions.erase(id);
}

void FabricServer::progress(std::stop_token stop) {
  // Reads aimed at this rank post no completions here: driving the queue is what moves them
  // along, and the wait object firing (poll on its descriptor) is the only sign that one came.
  auto spin_until = std::chrono::steady_clock::time_point{};
  while (!stop.stop_requested()) {
    bool polling = m_mode == FabricProgress::spin || !m_blocking ||
                   std::chrono::steady_clock::now() < spin_until;
    if (!polling && m_poll_fd) {
      if (wait_for_work() && m_mode == FabricProgress::adaptive)
        spin_until = std::chrono::steady_clock::now() + m_spin;
      polling = true;
    }
    drive_queue(!polling);
    // A caller waiting for the lock goes first: a mutex handed straight back to this loop
    // could keep a registration (a load) waiting indefinitely.
    while (m_waiting.load(std::memory_order_acquire) > 0 && !stop.stop_requested())
      std::this_thread::yield();
    if (polling) std::this_thread::yield();
  }
}

bool FabricServer::wait_for_work() {
  {
    std::lock_guard lock(m_mutex);
    if (!m_endpoint.try_wait()) return true;
  }
  // Outside the lock: registrations need not wait for the network.
  pollfd fd{m_endpoint.wait_fd(), POLLIN, 0};
  const int n = ::poll(&fd, 1, sread_timeout_ms);
  if (n < 0 && errno != EINTR) {
    // A descriptor poll refuses would return at once forever: a busy core, unnoticed.
    spdlog::warn(
        "fabric server ({}): poll on the queue's wait descriptor failed ({}); sleeping "
        "in fi_cq_sread from now on",
        m_endpoint.provider(), std::strerror(errno));
    m_poll_fd = false;
  }
  return n > 0;
}

void FabricServer::drive_queue(bool block) {
  std::array<fi_cq_entry, 16> entries;
  std::lock_guard lock(m_mutex);
  // Blocking, the provider progresses inside sread and wakes when its sockets or shared queues
  // have work; the bound lets stop requests and registrations through.
  const ssize_t n = block ? fi_cq_sread(m_endpoint.cq(), entries.data(), entries.size(), nullptr,
                                        sread_timeout_ms)
                          : fi_cq_read(m_endpoint.cq(), entries.data(), entries.size());
  if (block && n < 0 && n != -FI_EAGAIN && n != -FI_EAVAIL && n != -FI_ETIMEDOUT) {
    spdlog::warn("fabric server ({}): fi_cq_sread failed ({}); polling from now on",
                 m_endpoint.provider(), fabric_strerror(static_cast<int>(-n)));
    m_blocking = false;
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(m_endpoint.cq(), &err, 0) > 0) {
      spdlog::warn("fabric server ({}): completion error: {}", m_endpoint.provider(),
                   fabric_strerror(err.err));
    }
  }
}

std::unique_lock<std::mutex> FabricServer::lock_out_progress() const {
  m_waiting.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock lock(m_mutex);
  m_waiting.fetch_sub(1, std::memory_order_acq_rel);
  return lock;
}

}  // namespace ddstage::detail
