// The served-store commands: serve, load, status, stop (read --store lives in read_cmd).
#pragma once

#include <CLI/CLI.hpp>

#include "cli_context.hpp"

namespace ddstage::cli {

void setup_serve(CLI::App& app, CliContext& ctx);
void setup_load(CLI::App& app, CliContext& ctx);
void setup_status(CLI::App& app, CliContext& ctx);
void setup_stop(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
