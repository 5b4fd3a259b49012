// `ddstage bench MODE`: measurements users run on their own nodes, each against a baseline
// measured in the same run.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
