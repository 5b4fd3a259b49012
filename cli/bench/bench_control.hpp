// `ddstage bench control`: the control plane at scale. --simulate N runs the leader tree's
// production logic and a model of today's flat protocol through the same discrete-event
// simulator (libcore/src/cluster/), N ranks at 4 a node, with message costs measured on this
// machine first; --store DIR measures what can be measured on a running store without harming
// it (descriptor size, attach, a status round trip).
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench_control(CLI::App& bench, CliContext& ctx);

}  // namespace ddstage::cli
