#include "fabric/fabric_server.hpp"

#include <array>

#include <spdlog/spdlog.h>

#include "fabric/fabric_provider.hpp"

namespace ddstage::detail {

FabricServer::FabricServer(const FabricOptions& options)
    : m_endpoint(*choose_provider(options.provider, options.domain)), m_address(m_endpoint.address()) {
  if (m_endpoint.manual_progress()) m_progress = std::jthread([this](std::stop_token stop) { progress(stop); });
}

FabricServer::~FabricServer() {
  if (m_progress.joinable()) {
    m_progress.request_stop();
    m_progress.join();
  }
}

FabricPeer FabricServer::peer() const { return {m_endpoint.provider(), to_hex(m_address)}; }

uint64_t FabricServer::add_region(std::span<const std::byte> memory) {
  std::lock_guard lock(m_mutex);
  const uint64_t id = m_next_id++;
  m_regions.emplace(id, FabricRegion(m_endpoint, memory));
  return id;
}

FabricRegionInfo FabricServer::region(uint64_t id) const {
  std::lock_guard lock(m_mutex);
  auto it = m_regions.find(id);
  if (it == m_regions.end()) throw std::logic_error("no fabric region " + std::to_string(id));
  return it->second.info();
}

void FabricServer::remove_region(uint64_t id) {
  std::lock_guard lock(m_mutex);
  m_regions.erase(id);
}

void FabricServer::progress(std::stop_token stop) {
  // Target-side reads post no completions here; reading the queue is what moves them along.
  std::array<fi_cq_entry, 16> entries;
  while (!stop.stop_requested()) {
    ssize_t n = 0;
    {
      std::lock_guard lock(m_mutex);
      n = fi_cq_read(m_endpoint.cq(), entries.data(), entries.size());
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(m_endpoint.cq(), &err, 0) > 0) {
          spdlog::warn("fabric server ({}): completion error: {}", m_endpoint.provider(), fi_strerror(err.err));
        }
      }
    }
    if (n <= 0) std::this_thread::yield();
  }
}

}  // namespace ddstage::detail
