// One node's control logic as ClusterSimulator drives it: the leader tree's (NodeLeaderCore) or
// today's flat protocol's (FlatControlModel), so both are measured by the same clock and queues.
#pragma once

#include <cstdint>

#include "cluster_message.hpp"

namespace ddstage::detail {

/// What the simulator charges for work, taken from a micro-benchmark (measure_message_costs).
struct SimCosts {
  ClusterTime message = std::chrono::microseconds(5);   ///< one message on an open connection
  ClusterTime connect = std::chrono::microseconds(60);  ///< a new connection and one request on it
  ClusterTime latency = std::chrono::microseconds(20);  ///< one way across the network
  ClusterTime jitter = std::chrono::microseconds(20);   ///< added to latency, uniform
};

class SimNode {
 public:
  virtual ~SimNode() = default;
  virtual void start(ClusterTime now, Outbox& out) = 0;
  virtual void tick(ClusterTime now, Outbox& out) = 0;
  virtual void receive(ClusterTime now, const ClusterMessage& m, Outbox& out) = 0;
  virtual void rank_exited(ClusterTime now, int rank, Outbox& out) = 0;
  /// Coordinator only; the reply comes as a command_done event.
  virtual uint64_t start_command(ClusterTime now, Outbox& out) = 0;
  /// What handling `m` costs this node before the costs of what it sends.
  virtual ClusterTime cost(const ClusterMessage& m, const SimCosts& costs) const = 0;
  /// How often this node's timer fires.
  virtual ClusterTime tick_every() const = 0;
  /// Whether it keeps a view of the dead (every tree leader does; in the flat protocol only
  /// rank 0): detection counts as done when every node that does knows.
  virtual bool holds_view() const { return true; }
};

}  // namespace ddstage::detail
