// What a control message costs on this machine, measured, so the simulator charges real
// numbers: the leader tree's message (its handler in NodeLeaderCore plus a write and a read on
// an open local socket) and the flat protocol's heartbeat (a real control_request to a real
// ControlServer on loopback: connect, token, YAML, reply, close).
#pragma once

#include "sim_node.hpp"

namespace ddstage::detail {

/// The fastest of `rounds` of each (see message_costs.cpp); a few hundred take well under a
/// second.
SimCosts measure_message_costs(int rounds = 200);

}  // namespace ddstage::detail
