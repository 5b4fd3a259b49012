// `ddstage clean [--dry-run] [--store DIR]`: removes, on this node, what stores whose ranks are
// gone left in shared memory; safe in a Slurm epilogue.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_clean(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
