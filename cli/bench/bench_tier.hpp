// `ddstage bench tier --dir DIR`: random rows read from a shard in a node-local tier file (mapped,
// as readers on the node read it) against the same shard in memory, a raw pread of the same tier
// file, and a pread of the origin file, in one run, warm and cold.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench_tier(CLI::App& bench, CliContext& ctx);

}  // namespace ddstage::cli
