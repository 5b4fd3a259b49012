// `ddstage read DATASET.ddx --ids SPEC`: samples' raw bytes, concatenated in the order asked.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_read(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
