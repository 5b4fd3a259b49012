// `ddstage bench index`: what the index costs for huge 1-D datasets (issue 15): index.bin size,
// open time and flatten time for N rows of 16 bytes in one file, per checksum block size, and
// the cost of a verified random row read (it reads the row's whole block).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_report.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

struct BenchIndexOptions {
  std::string dir;  ///< where the sparse source and the indexes go (removed after)
  std::vector<uint64_t> rows{100'000'000};
  std::vector<uint64_t> block_bytes{256u << 10};
  uint64_t row_bytes = 16;
  uint64_t verify_samples = 200;
  BenchOutputs outputs;
};

void setup_bench_index(CLI::App& bench, CliContext& ctx);
void run_bench_index(const BenchIndexOptions& opts, const CliContext& ctx);

}  // namespace ddstage::cli
