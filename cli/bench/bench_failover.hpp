// `ddstage bench failover`: what a rank's loss costs a reader of a dataset held twice or more
// (load --replicas): batches streamed before, the one that hits the lost rank, and those after,
// the rank hung (SIGSTOP: failover after failover_timeout) or dead (SIGKILL).
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench_failover(CLI::App& bench, CliContext& ctx);

}  // namespace ddstage::cli
