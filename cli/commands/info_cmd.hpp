// `ddstage info DATASET.ddx`: what an index holds; --verify re-reads it; --settings shows config.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_info(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
