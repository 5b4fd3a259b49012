// `ddstage load [--store DIR] DATASET.ddx`: every server rank reads its shard of a flattened
// dataset, with a progress line on a terminal.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_load(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
