// How a reader reaches every rank of a dataset: the one place where the served Client and the
// embedded Store differ for reads, as data (which transport, which mapped region) plus a small
// hook for what only a served store needs (its ranks' liveness, a dataset withdrawn).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "transport/transport_registry.hpp"

namespace ddstage::detail {

/// Why a region cannot be read from this process: the error a batch that needs it throws.
struct Unreachable {
  ErrorKind kind = ErrorKind::usage;
  std::string why;
};

/// How one region's rows are reached.
struct Route {
  ShardRange range;
  int rank = 0;  ///< the rank holding the region
  /// Lower is nearer: a reader takes the nearest live copy of a sample (0: mapped into this
  /// process, 1: over a network transport).
  int distance = 0;
  /// The transport that reads this region; nullopt when none does (then `unreachable` says why).
  std::optional<TransportId> via;
  Unreachable unreachable;
  /// Where each row lies in the region, computed from the index (never from the region
  /// itself, which another process wrote): every read stays inside layout->total_bytes().
  const ShardLayout* layout = nullptr;
  /// The region mapped into this process (at least layout->total_bytes() long), for copies
  /// straight into device memory; empty when rows come over a network transport.
  std::span<const std::byte> mapped;
  /// Why rows of this rank cannot go straight to device memory (empty when mapped).
  std::string why_not_direct;
  /// Filled on first touch (load --lazy): samples are read only once its rank says they are in
  /// (RouteWatch::stage).
  bool lazy = false;
};

/// What every reader of a dataset shares, read-only once built: readers on many threads use it
/// without a lock.
struct RouteTable {
  const Index* index = nullptr;
  /// Which regions hold each sample (an embedded store: region r is rank r's shard).
  const Placement* placement = nullptr;
  std::vector<Route> routes;  ///< by region
  TransportTargets targets;   ///< what each reader's transports are opened on, by region
  int ranks = 0;              ///< the ranks regions belong to: what a RouteWatch watches
  Settings settings;          ///< fabric.*, read_timeout, gpu.path
  /// Verify's origin reads (the rows of a block on a rank that cannot be read) skip the
  /// sources' size/mtime check, as the store's own loads did.
  bool allow_stale = false;
};

/// What a served store adds to a batch, per reader (it may keep per-batch scratch). The
/// embedded Store has none: its ranks live and die with the job.
class RouteWatch {
 public:
  virtual ~RouteWatch() = default;
  /// Once per batch, before anything is read, for the ranks it touches: throws when one of
  /// them cannot serve any more (its process gone, the dataset withdrawn).
  virtual void check(std::span<const int> owners) = 0;
  /// After a batch's transfer threw `error`: throws a better explanation when there is one (a
  /// rank that died, a dataset replaced), else returns and the error stands.
  virtual void explain(const Error& error, std::chrono::steady_clock::time_point started) = 0;
  /// Whether rank r may still be read: false once its process is known to have exited (or the
  /// store marked it lost). Throws nothing, so a reader can take a dead rank's rows from another
  /// copy, and verify a block's from origin.
  virtual bool alive(int r) const = 0;
  /// Before a batch reads ids (ascending) of a lazy region: returns once its rank has staged
  /// them. An owner that cannot be reached is an Error naming its rank (another copy may do).
  virtual void stage(uint32_t /*region*/, std::span<const uint64_t> /*ids*/) {}
};

/// Where a reader's routes come from: keeps the table alive for as long as a reader reads.
class RouteSource {
 public:
  virtual ~RouteSource() = default;
  virtual const RouteTable& routes() const noexcept = 0;
  /// A new watch for one reader; null when there is nothing to watch.
  virtual std::unique_ptr<RouteWatch> watch() const { return nullptr; }
};

}  // namespace ddstage::detail
