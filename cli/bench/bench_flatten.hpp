// `ddstage bench flatten SRC...`: flatten throughput against a plain sequential read (cat).
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_bench_flatten(CLI::App& bench, CliContext& ctx);

}  // namespace ddstage::cli
