// `ddstage wait [--store DIR] [--timeout 60s] [--pid PID]`: returns once a live store answers,
// so a job script can run `serve &` and then load.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_wait(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
