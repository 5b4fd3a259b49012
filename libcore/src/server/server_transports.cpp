// What the ranks offer readers besides shared memory: a libfabric endpoint per rank when the
// transport asks for one, refused when an address it publishes reaches only its own host.
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "loopback.hpp"
#include "mpi/mpi_agree.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

/// The host part of "HOST:PORT" or "[IPV6]:PORT".
std::string host_of(const std::string& address) {
  if (address.starts_with('[')) return address.substr(1, address.find(']') - 1);
  return address.substr(0, address.rfind(':'));
}

}  // namespace

std::optional<PublishedEndpoint> ServerRank::start_fabric(bool several_hosts) {
  const bool wanted = m_transport == TransportId::fabric || (!m_transport && several_hosts);
  agree(caught([&] {
          // Probed only now, after MPI_Init (which may set the FI_* variables libfabric reads
          // once) and with SIGTERM blocked in the threads a provider starts; agreed, so that
          // every rank fails alike.
          if (m_transport == TransportId::fabric)
            check_transport_available(TransportId::fabric, "serve --transport");
#if DDSTAGE_HAVE_FABRIC
          if (wanted) m_fabric.emplace(FabricOptions::from(m_options.settings));
#endif
        }),
        [](int rank) {
          return fmt::format("rank {} could not open its libfabric endpoint: ", rank);
        });
#if DDSTAGE_HAVE_FABRIC
  if (!m_fabric) return std::nullopt;
  const auto peer = m_fabric->peer();
  if (is_root()) spdlog::info("serving over libfabric too: provider {}", peer.provider);
  return PublishedEndpoint{peer.provider, peer.address_hex};
#else
  if (wanted && is_root()) {
    spdlog::warn(
        "the store spans several hosts but this ddstage was built without libfabric: clients can "
        "read only ranks on their own node");
  }
  return std::nullopt;
#endif
}

void ServerRank::refuse_loopback(const std::string& control, const std::string& fabric_ip) {
  const std::size_t host_count = std::set<std::string>(m_hosts.begin(), m_hosts.end()).size();
  if (host_count < 2) return;  // every rank has the same m_hosts: all skip the collective alike
  const auto failure = caught([&] {
    const auto lo = control.empty() ? std::string() : loopback_address_of(host_of(control));
    if (!lo.empty()) {
      throw UsageError(fmt::format(
          "rank {}'s control address {} is loopback ({}) but the ranks span {} hosts: {}",
          m_mpi.rank(), control, lo, host_count,
          is_root() ? "pass --listen with an address the other nodes reach"
                    : "make this host's name resolve to an address rank 0 reaches"));
    }
    if (fabric_ip.empty() || loopback_address_of(fabric_ip).empty()) return;
#if DDSTAGE_HAVE_FABRIC
    const auto provider = m_fabric ? m_fabric->peer().provider : "";
#else
    const std::string provider;
#endif
    throw UsageError(
        fmt::format("rank {} on {} publishes the libfabric address {} ({}), a loopback address, "
                    "but the ranks span {} hosts: "
                    "point FI_TCP_IFACE (FI_NET_IFACE, FI_UDP_IFACE for those providers) or the "
                    "fabric.domain setting at an "
                    "interface the other nodes reach",
                    m_mpi.rank(), m_host, fabric_ip, provider, host_count));
  });
  agree(failure, [](int) { return std::string(); });
}

std::optional<PublishedEndpoint> ServerRank::start_transports() {
  const std::set<std::string> distinct(m_hosts.begin(), m_hosts.end());
  const auto fabric = start_fabric(distinct.size() > 1);
  // The other ranks' control sockets too: rank 0 sends them their parts. Its own was checked
  // before the heartbeats started (run).
  const std::string control = is_root() ? "" : m_control->address();
#if DDSTAGE_HAVE_FABRIC
  refuse_loopback(control, m_fabric ? m_fabric->ip_address() : "");
#else
  refuse_loopback(control, "");
#endif
  return fabric;
}

}  // namespace ddstage::detail
