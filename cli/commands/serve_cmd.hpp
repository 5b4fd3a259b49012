// `ddstage serve [--store DIR] [--listen HOST[:PORT]] [--transport T] [--mem-limit SIZE]`: runs a
// store, one rank per MPI process (mpiexec/srun), until `stop`.
#pragma once

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"

namespace ddstage::cli {

void setup_serve(CLI::App& app, CliContext& ctx);

}  // namespace ddstage::cli
