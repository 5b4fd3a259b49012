// The control plane's clocks, and its time type.
#pragma once

#include <chrono>

namespace ddstage::detail {

/// Time as the control logic sees it: a point on some monotonic clock (steady_clock's epoch in
/// production, zero at a simulation's start).
using ClusterTime = std::chrono::nanoseconds;

/// The control plane's clocks. The defaults tell a starved node (every core busy) or one
/// stopped for 2 s from a dead one, and still see a dead node everywhere within 5 s:
/// suspect_after + suspicion + a tick and a few hops.
struct ClusterTimings {
  /// The coordinator publishes what it learned since its last tick as one view: 64 nodes found
  /// dead together are one update.
  ClusterTime tick = std::chrono::milliseconds(100);
  ClusterTime keepalive = std::chrono::milliseconds(250);  ///< on each tree link, jittered ±20 %
  /// A tree neighbour silent this long (while this node was itself awake) is reported.
  ClusterTime suspect_after = std::chrono::milliseconds(1500);
  /// A reported node that nobody hears from for this long after the report is dead.
  ClusterTime suspicion = std::chrono::milliseconds(2000);
  ClusterTime reprobe = std::chrono::milliseconds(500);  ///< probes and reports again meanwhile
  ClusterTime command_timeout = std::chrono::seconds(5);
  int witnesses = 3;  ///< nodes besides the coordinator that probe a suspect
  int fanout = 16;    ///< the leader tree's degree
};

}  // namespace ddstage::detail
