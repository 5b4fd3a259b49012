// `ddstage stop [--store DIR]`: shuts a store down; says which ranks could not be stopped
// from here.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_stop(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
