// `ddstage bench load --store DIR INDEX`: a running store's load bandwidth against a sequential
// read (cat) of the same files, measured in the same run.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench_load(CLI::App& bench, CliContext& ctx);

}  // namespace ddstage::cli
