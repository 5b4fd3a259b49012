// `ddstage bench origin DATASET.ddx`: per-sample reads through the index (pread) against the
// HDF5 API, the same samples in the same run.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "bench/bench_report.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

struct BenchOriginOptions {
  std::string dataset;  ///< the index directory
  uint64_t samples = 10000;
  uint64_t seed = 1;
  BenchOutputs outputs;
  bool allow_stale = false;
};

void setup_bench_origin(CLI::App& bench, CliContext& ctx);
void run_bench_origin(const BenchOriginOptions& opts, const CliContext& ctx);

}  // namespace ddstage::cli
