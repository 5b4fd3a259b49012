// `ddstage bench MODE`: measurements users run on their own nodes, each against a baseline
// measured in the same run.
#pragma once

#include <CLI/CLI.hpp>

#include "cli_context.hpp"

namespace ddstage::cli {

void setup_bench(CLI::App& app, CliContext& ctx);

/// `bench origin`: per-sample reads through the index (pread) vs the HDF5 API.
struct BenchOriginOptions {
  std::string dataset;
  uint64_t samples = 10000;
  uint64_t seed = 1;
  std::string json;
  bool allow_stale = false;
};
void run_bench_origin(const BenchOriginOptions& opts, const CliContext& ctx);

}  // namespace ddstage::cli
