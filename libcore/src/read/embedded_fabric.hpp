// The embedded Store's libfabric side (transport "fabric"): this rank's endpoint, and each
// dataset's shard registered with it, with every rank's address and keys learned collectively.
// The one place the embedded Store meets libfabric; a build without it has a stub that refuses.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "ddstage/settings.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "fabric/fabric_peer.hpp"

namespace ddstage::detail {

/// Keeps one shard registered for remote reads until destroyed (before the shard is freed).
class ShardRegistration {
 public:
  virtual ~ShardRegistration() = default;
};

class EmbeddedFabric {
 public:
  /// Collective over comm: opens this rank's endpoint (a failure on any rank is thrown on every
  /// rank) and learns every rank's address and host. UsageError in a build without libfabric.
  EmbeddedFabric(const Settings& settings, MPI_Comm comm);
  EmbeddedFabric(const EmbeddedFabric&) = delete;
  EmbeddedFabric& operator=(const EmbeddedFabric&) = delete;
  ~EmbeddedFabric();

  /// Collective: registers this rank's filled `region` and fills `remotes` (by rank) with how
  /// to read each rank's shard; ranks this process addresses directly (`direct`) keep an empty
  /// remote, as they are copied.
  std::unique_ptr<ShardRegistration> expose(std::span<const std::byte> region,
                                            const std::vector<ShardLayout>& layouts,
                                            const std::vector<const std::byte*>& direct,
                                            std::vector<FabricRemote>& remotes);

 private:
  struct Impl;
  std::unique_ptr<Impl> m;
};

}  // namespace ddstage::detail
