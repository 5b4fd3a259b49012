// The transport registry: the only read-side code that knows which backends this build has.
#include "transport/transport_registry.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/transport_info.hpp"
#include "transport/copy_transport.hpp"

#if DDSTAGE_HAVE_MPI
#include "mpi/mpi_window.hpp"
#include "transport/mpi_rma_transport.hpp"
#endif
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_options.hpp"
#include "fabric/fabric_provider.hpp"
#include "transport/fabric_transport.hpp"
#endif

namespace ddstage::detail {
namespace {

TransportProbe probe_shm() {
  return {.available = true};
}

TransportProbe probe_mpi() {
#if DDSTAGE_HAVE_MPI
  return {.available = true};
#else
  return {.why_not = "this ddstage was built without MPI (DDSTAGE_WITH_MPI=OFF)"};
#endif
}

#if DDSTAGE_HAVE_FABRIC
TransportProbe find_fabric_providers() {
  try {
    // Any provider with RMA reads will do: which one a reader uses is the server's choice.
    if (!describe_providers("auto", "").empty()) return {.available = true};
    return {.why_not =
                "libfabric lists no provider with RMA reads on this node (see `ddstage info "
                "--fabric`)"};
  } catch (const Error& e) {
    return {.why_not = e.what()};
  }
}
#endif

TransportProbe probe_fabric() {
#if DDSTAGE_HAVE_FABRIC
  // libfabric reads its environment once per process, so its answer cannot change: ask once.
  static const TransportProbe probe = find_fabric_providers();
  return probe;
#else
  return {.why_not = "this ddstage was built without libfabric (DDSTAGE_WITH_FABRIC=OFF)"};
#endif
}

constexpr std::array<TransportEntry, 3> registry{{
    {TransportId::shm, "shm", "memcpy from the shared-memory segments of ranks on this node",
     probe_shm},
    {TransportId::mpi, "mpi",
     "MPI RMA gets from an embedded store's window (memcpy where it is shared)", probe_mpi},
    {TransportId::fabric, "fabric", "libfabric fi_read from ranks' registered regions, on any node",
     probe_fabric},
}};

/// "a, b or c".
std::string spelled_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

[[noreturn]] void throw_not_allowed(std::string_view value, std::span<const TransportId> allowed,
                                    bool allowed_auto, std::string_view option) {
  std::vector<std::string_view> names;
  if (allowed_auto) names.push_back("auto");
  for (TransportId id : allowed) names.push_back(transport_entry(id).name);
  throw UsageError(std::string(option) + " must be " + spelled_list(names) + ", not '" +
                   std::string(value) + "'");
}

std::unique_ptr<Transport> open_mpi([[maybe_unused]] const TransportTargets& targets) {
#if DDSTAGE_HAVE_MPI
  if (!targets.window) throw std::logic_error("transport mpi opened without a window");
  return std::make_unique<MpiRmaTransport>(targets.window->get(), targets.direct);
#else
  throw std::logic_error("transport mpi opened in a build without MPI");
#endif
}

std::unique_ptr<Transport> open_fabric([[maybe_unused]] const TransportTargets& targets,
                                       [[maybe_unused]] const Settings& settings) {
#if DDSTAGE_HAVE_FABRIC
  return std::make_unique<FabricTransport>(FabricOptions::from(settings), targets.remotes);
#else
  throw std::logic_error("transport fabric opened in a build without libfabric");
#endif
}

}  // namespace

std::span<const TransportEntry> transports() noexcept {
  return registry;
}

const TransportEntry& transport_entry(TransportId id) noexcept {
  return *std::find_if(registry.begin(), registry.end(),
                       [id](const TransportEntry& e) { return e.id == id; });
}

std::optional<TransportId> parse_transport_name(std::string_view value,
                                                std::span<const TransportId> allowed,
                                                bool allowed_auto, std::string_view option) {
  if (allowed_auto && value == "auto") return std::nullopt;
  const auto entry = std::find_if(registry.begin(), registry.end(), [&](const TransportEntry& e) {
    return e.name == value && std::find(allowed.begin(), allowed.end(), e.id) != allowed.end();
  });
  if (entry == registry.end()) throw_not_allowed(value, allowed, allowed_auto, option);
  return entry->id;
}

void check_transport_available(TransportId id, std::string_view option) {
  const TransportEntry& entry = transport_entry(id);
  if (TransportProbe probe = entry.probe(); !probe.available) {
    throw UsageError(std::string(option) + " " + std::string(entry.name) + ": " + probe.why_not);
  }
}

std::optional<TransportId> parse_transport(std::string_view value,
                                           std::span<const TransportId> allowed, bool allowed_auto,
                                           std::string_view option) {
  const auto id = parse_transport_name(value, allowed, allowed_auto, option);
  if (id) check_transport_available(*id, option);
  return id;
}

std::unique_ptr<Transport> open_transport(TransportId id, const TransportTargets& targets,
                                          const Settings& settings) {
  check_transport_available(id, "transport");
  switch (id) {
    case TransportId::shm:
      return std::make_unique<CopyTransport>("shm", targets.mapped, targets.files);
    case TransportId::mpi:
      return open_mpi(targets);
    case TransportId::fabric:
      return open_fabric(targets, settings);
  }
  throw std::logic_error("unknown transport id");
}

}  // namespace ddstage::detail

namespace ddstage {

std::vector<TransportInfo> describe_transports() {
  std::vector<TransportInfo> out;
  for (const detail::TransportEntry& e : detail::transports()) {
    detail::TransportProbe probe = e.probe();
    out.push_back({std::string(e.name), std::string(e.description), probe.available,
                   std::move(probe.why_not)});
  }
  return out;
}

}  // namespace ddstage
