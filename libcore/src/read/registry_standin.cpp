// TEMPORARY stand-in for the transport registry (libcore/src/transport/transport_registry.hpp)
// until the "transports" branch is merged: the lead deletes this file at merge.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "ddstage/config.hpp"
#include "transport/copy_transport.hpp"
#include "transport/transport_registry.hpp"
#if DDSTAGE_HAVE_MPI
#include "mpi/mpi_window.hpp"
#include "transport/mpi_rma_transport.hpp"
#endif
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_transport.hpp"
#endif

namespace ddstage::detail {
namespace {

TransportProbe always() {
  return {true, {}};
}
TransportProbe mpi_probe() {
  if (DDSTAGE_HAVE_MPI) return {true, {}};
  return {false, "this ddstage was built without MPI"};
}
TransportProbe fabric_probe() {
  if (DDSTAGE_HAVE_FABRIC) return {true, {}};
  return {false, "this ddstage was built without libfabric"};
}

constexpr std::array<TransportEntry, 3> entries{{
    {TransportId::shm, "shm", "shared memory on this node", always},
    {TransportId::mpi, "mpi", "MPI RMA gets (embedded store)", mpi_probe},
    {TransportId::fabric, "fabric", "libfabric fi_read", fabric_probe},
}};

#if DDSTAGE_HAVE_FABRIC
/// Until FabricTransport throws TransportError itself: what its errors mean to a reader.
class FabricLane final : public Transport {
 public:
  FabricLane(const Settings& settings, std::vector<FabricRemote> remotes)
      : m_fabric(FabricOptions::from(settings), std::move(remotes)) {}
  std::string_view name() const noexcept override { return "fabric"; }
  void post(std::span<const ReadOp> reads) override {
    translate([&] { m_fabric.post(reads); });
  }
  void wait() override {
    translate([&] { m_fabric.wait(); });
  }
  void quiesce() noexcept override { m_fabric.quiesce(); }
  void forget_destinations() noexcept override { m_fabric.forget_destinations(); }

 private:
  template <class F>
  void translate(F&& f) {
    try {
      f();
    } catch (const FabricError& e) {
      throw TransportError(e.message(), e.context(), closed_region_can_cause(e));
    }
  }
  FabricTransport m_fabric;
};
#endif

}  // namespace

std::span<const TransportEntry> transports() noexcept {
  return entries;
}

const TransportEntry& transport_entry(TransportId id) noexcept {
  return entries[static_cast<std::size_t>(id)];
}

std::optional<TransportId> parse_transport(std::string_view value,
                                           std::span<const TransportId> allowed, bool allowed_auto,
                                           std::string_view option) {
  if (allowed_auto && value == "auto") return std::nullopt;
  std::string names = allowed_auto ? "auto" : "";
  for (TransportId id : allowed)
    names += (names.empty() ? "" : "|") + std::string(transport_entry(id).name);
  for (TransportId id : allowed) {
    const TransportEntry& e = transport_entry(id);
    if (e.name != value) continue;
    if (auto probe = e.probe(); !probe.available)
      throw UsageError(fmt::format("{} {}: {}", option, value, probe.why_not));
    return id;
  }
  throw UsageError(fmt::format("{} must be {}, not '{}'", option, names, value));
}

std::unique_ptr<Transport> open_transport(TransportId id, const TransportTargets& targets,
                                          [[maybe_unused]] const Settings& settings) {
  if (auto probe = transport_entry(id).probe(); !probe.available) {
    throw UsageError(fmt::format("transport {}: {}", transport_entry(id).name, probe.why_not));
  }
  switch (id) {
    case TransportId::shm:
      return std::make_unique<CopyTransport>("shm", targets.mapped);
#if DDSTAGE_HAVE_MPI
    case TransportId::mpi:
      return std::make_unique<MpiRmaTransport>(targets.window->get(), targets.direct);
#endif
#if DDSTAGE_HAVE_FABRIC
    case TransportId::fabric:
      return std::make_unique<FabricLane>(settings, targets.remotes);
#endif
    default:
      break;
  }
  throw UsageError(fmt::format("transport {} is not built", transport_entry(id).name));
}

}  // namespace ddstage::detail
