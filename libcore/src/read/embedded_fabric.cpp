#include "read/embedded_fabric.hpp"

#include <optional>

#include "fabric/fabric_options.hpp"
#include "fabric/fabric_server.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_exchange.hpp"
#include "process.hpp"

namespace ddstage::detail {
namespace {

/// What each rank tells the others about its endpoint.
struct RankEndpoint {
  FabricPeer peer;
  std::string host;  // for error messages

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.peer, self.host);
  }
};

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
  for (auto& rank : allgather(RankEndpoint{m->server->peer(), host_name()}, comm)) {
    m->peers.push_back(std::move(rank.peer));
    m->hosts.push_back(std::move(rank.host));
  }
}

EmbeddedFabric::~EmbeddedFabric() = default;

std::unique_ptr<ShardRegistration> EmbeddedFabric::expose(
    std::span<const std::byte> region, const std::vector<ShardLayout>& layouts,
    const std::vector<const std::byte*>& direct, std::vector<FabricRemote>& remotes) {
  std::exception_ptr failure;
  std::unique_ptr<FabricShard> shard;
  FabricRegionInfo mine;
  try {
    shard = std::make_unique<FabricShard>(*m->server, region);
    mine = shard->registration.info();
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, m->comm);
  const auto all = allgather(mine, m->comm);
  remotes.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (direct[r]) continue;  // copied, not read over the network
    remotes[r] = {m->peers[r], {all[r].key, all[r].base, layouts[r].total_bytes()}, m->hosts[r]};
  }
  return shard;
}

}  // namespace ddstage::detail
