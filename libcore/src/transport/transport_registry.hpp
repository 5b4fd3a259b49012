// The one vocabulary of transport names, what each needs to be available, and the one place
// that makes them: the only read-side code that knows which backends this build has.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/settings.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "fabric/fabric_peer.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

class MpiWindow;

enum class TransportId { shm, mpi, fabric };

/// Whether a transport can be used in this build on this machine, and if not, why.
struct TransportProbe {
  bool available = false;
  std::string
      why_not;  ///< one line when not available ("this ddstage was built without libfabric")
};

struct TransportEntry {
  TransportId id;
  std::string_view name;         ///< "shm", "mpi", "fabric": the value of every transport option
  std::string_view description;  ///< one line for `info --settings` and --help texts
  TransportProbe (*probe)();
};

/// Every transport, built or not, in a fixed order.
std::span<const TransportEntry> transports() noexcept;
const TransportEntry& transport_entry(TransportId id) noexcept;

/// The transport an option names, without asking whether it is available (no probe: libfabric
/// reads its environment once, and an MPI job's MPI_Init may set FI_* variables first): nullopt
/// for "auto" (when `allowed_auto`), else the entry's id. UsageError naming `option`
/// ("transport", "StoreOptions::transport", "serve --transport") for an unknown name (listing
/// the ones allowed) or a name outside `allowed`.
std::optional<TransportId> parse_transport_name(std::string_view value,
                                                std::span<const TransportId> allowed,
                                                bool allowed_auto, std::string_view option);

/// UsageError "OPTION NAME: why not" when the transport's probe says it is unavailable.
void check_transport_available(TransportId id, std::string_view option);

/// parse_transport_name, then check_transport_available for a named transport.
std::optional<TransportId> parse_transport(std::string_view value,
                                           std::span<const TransportId> allowed, bool allowed_auto,
                                           std::string_view option);

/// What a transport reads from, per target (vectors indexed by ReadOp::target: a region; an
/// embedded store's regions are its ranks; a target a transport does not reach has an empty
/// span, a null pointer or an empty address).
struct TransportTargets {
  std::vector<std::span<const std::byte>> mapped;  ///< shm: regions mapped into this process
  /// shm: a region's file when it is on a tier, read with pread rather than through its mapping
  /// (empty, or null for a target, otherwise).
  std::vector<const FileDescriptor*> files;
  const MpiWindow* window = nullptr;     ///< mpi: the window every rank's shard lies in
  std::vector<const std::byte*> direct;  ///< mpi: regions addressed directly (memcpy)
  std::vector<FabricRemote> remotes;     ///< fabric: each region's endpoint and key
};

/// A reader's own instance of a transport (its endpoint, its completion queue). UsageError
/// when the entry's probe fails. `settings`: fabric.* and read_timeout.
std::unique_ptr<Transport> open_transport(TransportId id, const TransportTargets& targets,
                                          const Settings& settings);

}  // namespace ddstage::detail
