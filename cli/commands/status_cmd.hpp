// `ddstage status [--store DIR] [--json]`: a running store's ranks, datasets and memory;
// exit 1 when it has lost a rank or does not answer.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_status(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
