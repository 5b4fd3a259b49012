#include "ddstage/tool/fabric_floor.hpp"

#include <rdma/fi_rma.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "ddstage/error.hpp"
#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_options.hpp"
#include "fabric/fabric_peer.hpp"
#include "fabric/fabric_provider.hpp"
#include "fabric/fabric_server.hpp"

namespace ddstage {

using Clock = std::chrono::steady_clock;

struct FabricFloorTarget::State {
  explicit State(const Settings& settings, uint64_t bytes)
      : server(detail::FabricOptions::from(settings)),
        memory(bytes, std::byte{1}),
        registration(server, memory) {}
  detail::FabricServer server;
  std::vector<std::byte> memory;
  detail::FabricRegistration registration;  // after the memory: deregistered first
};

FabricFloorTarget::FabricFloorTarget(const Settings& settings, uint64_t bytes)
    : m(std::make_unique<State>(settings, std::max<uint64_t>(bytes, 1))) {}
FabricFloorTarget::FabricFloorTarget(FabricFloorTarget&&) noexcept = default;
FabricFloorTarget& FabricFloorTarget::operator=(FabricFloorTarget&&) noexcept = default;
FabricFloorTarget::~FabricFloorTarget() = default;

std::string FabricFloorTarget::address() const {
  const auto peer = m->server.peer();
  const auto region = m->registration.info();
  return fabric_floor_address(peer.provider, peer.address_hex, region.key, region.base,
                              region.bytes);
}

struct FabricFloorReader::State {
  State(const Settings& settings, const std::string& target)
      : options(detail::FabricOptions::from(settings)) {
    std::istringstream in(target);
    std::string hex;
    if (!(in >> provider >> hex >> region.key >> region.base >> region.bytes)) {
      throw UsageError("bad fabric floor target address '" + target + "'");
    }
    peer_hex = hex;
    const auto address = detail::from_hex(hex);
    endpoint.emplace(*detail::find_provider(provider, options.domain, address.size()));
    peer = endpoint->insert_peer(address);
    contexts.resize(std::max<std::size_t>(options.window, 1));
  }

  /// Reaps completions until at least one landed; throws on a failed read or a time-out.
  std::size_t reap(std::vector<uint32_t>& free);
  /// One call: `batch` reads, all completed.
  void call(uint64_t row_bytes, uint64_t batch, std::mt19937_64& rng);
  /// The error of a call that made no progress for read_timeout (what: what did not happen).
  Error no_progress(const std::string& what) const;

  detail::FabricOptions options;
  std::string provider;
  std::string peer_hex;  // the target's address, for errors
  detail::FabricRegionInfo region;
  // Declared before the endpoint: reads a failed call left in flight end with it, before these go.
  std::vector<fi_context2> contexts;  // one per read in flight; a completion names its slot
  std::vector<std::byte> dest;        // one row per read of a call
  std::optional<detail::FabricEndpoint> endpoint;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  detail::MrPtr dest_mr;  // only when the provider needs FI_MR_LOCAL; closed before the domain
  void* desc = nullptr;
};

std::size_t FabricFloorReader::State::reap(std::vector<uint32_t>& free) {
  std::array<fi_cq_entry, 64> entries;
  const auto start = Clock::now();
  for (;;) {
    const ssize_t n = fi_cq_read(endpoint->cq(), entries.data(), entries.size());
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        free.push_back(static_cast<uint32_t>(static_cast<fi_context2*>(entries[i].op_context) -
                                             contexts.data()));
      }
      return static_cast<std::size_t>(n);
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(endpoint->cq(), &err, 0);
      throw detail::FabricError("fi_read (fabric floor)", provider, -err.err);
    }
    if (n != -FI_EAGAIN) throw detail::FabricError("fi_cq_read", provider, static_cast<int>(n));
    if (Clock::now() - start > options.read_timeout) throw no_progress("reads completed");
  }
}

Error FabricFloorReader::State::no_progress(const std::string& what) const {
  return Error(ErrorKind::runtime, "fabric floor: no " + what + " from the target at " + peer_hex +
                                       " over " + provider + " within read_timeout (" +
                                       std::to_string(options.read_timeout.count()) + " ms)");
}

void FabricFloorReader::State::call(uint64_t row_bytes, uint64_t batch, std::mt19937_64& rng) {
  std::vector<uint32_t> free(contexts.size());
  for (uint32_t i = 0; i < free.size(); ++i) free[i] = i;
  const uint64_t slots_rows = region.bytes / row_bytes;
  uint64_t posted = 0, done = 0;
  // A peer that cannot be reached never takes a read (rxm's connect keeps answering EAGAIN).
  auto idle_since = Clock::now();
  while (done < batch) {
    // The same caps as a get_batch reader: the window, and the bytes in flight (one read always
    // goes).
    const bool room =
        posted < batch && !free.empty() &&
        (posted == done || (posted - done + 1) * row_bytes <= options.max_bytes_in_flight);
    if (!room) {
      done += reap(free);
      continue;
    }
    const uint32_t slot = free.back();
    const uint64_t offset =
        std::uniform_int_distribution<uint64_t>(0, slots_rows - 1)(rng) * row_bytes;
    const ssize_t rc = fi_read(endpoint->ep(), dest.data() + posted * row_bytes, row_bytes, desc,
                               peer, region.base + offset, region.key, &contexts[slot]);
    if (rc == 0) {
      free.pop_back();
      ++posted;
      idle_since = Clock::now();
    } else if (rc == -FI_EAGAIN) {
      // rxm connects lazily, and a full queue drains only as completions are read.
      if (posted > done) {
        done += reap(free);
        idle_since = Clock::now();
      } else {
        fi_cq_entry none;
        fi_cq_read(endpoint->cq(), &none, 1);  // nothing posted: only drives the connection
        if (Clock::now() - idle_since > options.read_timeout) throw no_progress("read accepted");
      }
    } else {
      throw detail::FabricError("fi_read (fabric floor)", provider, static_cast<int>(rc));
    }
  }
}

FabricFloorReader::FabricFloorReader(const Settings& settings, const std::string& target_address)
    : m(std::make_unique<State>(settings, target_address)) {}
FabricFloorReader::FabricFloorReader(FabricFloorReader&&) noexcept = default;
FabricFloorReader& FabricFloorReader::operator=(FabricFloorReader&&) noexcept = default;
FabricFloorReader::~FabricFloorReader() = default;

const std::string& FabricFloorReader::provider() const noexcept {
  return m->provider;
}

FabricFloorRun FabricFloorReader::run(uint64_t row_bytes, uint64_t rows, uint64_t batch,
                                      uint64_t seed) {
  if (row_bytes == 0 || row_bytes > m->region.bytes || batch == 0) {
    throw UsageError("fabric floor: rows of " + std::to_string(row_bytes) +
                     " bytes in batches of " + std::to_string(batch) + " do not fit a target of " +
                     std::to_string(m->region.bytes) + " bytes");
  }
  // Each read of a call lands at its own place in a batch-sized destination, as get_batch's rows
  // do: reusing the few slots in flight would keep the floor's destination in cache while
  // get_batch writes batch x row bytes of the caller's buffer.
  const uint64_t slot_bytes = std::min(batch, rows) * row_bytes;
  if (m->dest.size() < slot_bytes) {
    m->dest_mr.reset();
    m->desc = nullptr;
    m->dest.assign(slot_bytes, std::byte{0});
    if (m->endpoint->mr_mode(FI_MR_LOCAL)) {
      m->dest_mr = m->endpoint->register_memory(m->dest.data(), m->dest.size(), FI_READ, 1);
      m->desc = fi_mr_desc(m->dest_mr.get());
    }
  }
  std::mt19937_64 rng(seed);
  FabricFloorRun r;
  const auto t0 = Clock::now();
  for (uint64_t first = 0; first < rows; first += batch) {
    const uint64_t n = std::min(batch, rows - first);
    const auto c0 = Clock::now();
    m->call(row_bytes, n, rng);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - c0).count();
    r.ns_per_row.record(static_cast<uint64_t>(ns) / n);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.rows = rows;
  r.bytes = rows * row_bytes;
  return r;
}

}  // namespace ddstage
