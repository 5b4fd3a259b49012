#include "read/embedded_fabric.hpp"

#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "fabric/fabric_options.hpp"
#include "fabric/fabric_server.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"
#include "process.hpp"

namespace ddstage::detail {
namespace {

class FabricShard final : public ShardRegistration {
 public:
  FabricShard(FabricServer& server, std::span<const std::byte> region)
      : registration(server, region) {}
  FabricRegistration registration;
};

}  // namespace

struct EmbeddedFabric::Impl {
  MPI_Comm comm;
  std::optional<FabricServer> server;
  std::vector<FabricPeer> peers;   // by rank
  std::vector<std::string> hosts;  // by rank, for error messages
};

EmbeddedFabric::EmbeddedFabric(const Settings& settings, MPI_Comm comm)
    : m(std::make_unique<Impl>()) {
  m->comm = comm;
  std::exception_ptr failure;
  try {
    m->server.emplace(FabricOptions::from(settings));
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, comm);
  const auto peer = m->server->peer();
  const auto all =
      allgather_strings(peer.provider + " " + peer.address_hex + " " + host_name(), comm);
  for (const auto& line : all) {
    std::istringstream in(line);
    FabricPeer p;
    std::string host;
    in >> p.provider >> p.address_hex >> host;
    m->peers.push_back(p);
    m->hosts.push_back(host);
  }
}

EmbeddedFabric::~EmbeddedFabric() = default;

std::unique_ptr<ShardRegistration> EmbeddedFabric::expose(
    std::span<const std::byte> region, const std::vector<ShardLayout>& layouts,
    const std::vector<const std::byte*>& direct, std::vector<FabricRemote>& remotes) {
  std::exception_ptr failure;
  std::unique_ptr<FabricShard> shard;
  std::string mine;
  try {
    shard = std::make_unique<FabricShard>(*m->server, region);
    mine = fmt::format("{} {}", shard->registration.info().key, shard->registration.info().base);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, m->comm);
  const auto all = allgather_strings(mine, m->comm);
  remotes.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (direct[r]) continue;  // copied, not read over the network
    std::istringstream in(all[r]);
    FabricRegionInfo info{.bytes = layouts[r].total_bytes()};
    in >> info.key >> info.base;
    remotes[r] = {m->peers[r], info, m->hosts[r]};
  }
  return shard;
}

}  // namespace ddstage::detail
