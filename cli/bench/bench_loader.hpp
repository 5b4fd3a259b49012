// `ddstage bench loader`: a training loop with a prefetching loader, fed from a running store,
// from the same store after a full or a lazy load of the index, and from the origin files
// (index + pread, and the HDF5 API), with the DataLoader wait per step and its stall tail, and
// each epoch's first step and length, for each.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_report.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

struct BenchLoaderOptions {
  std::string store;                 ///< a running store; empty: origin modes only, from index
  std::string dataset;               ///< the dataset's name in the store
  std::string index;                 ///< DATASET.ddx: without a store, or to load (full, lazy)
  std::vector<std::string> fields;   ///< fields to read per step; empty: all of them
  std::vector<std::string> compare;  ///< modes to run too: origin, hdf5, full, lazy
  uint64_t batch = 64;
  double compute_ms = 150;
  uint64_t steps = 2000;
  unsigned prefetch = 4;
  unsigned threads = 2;
  uint64_t seed = 1;
  bool warm = false;  ///< keep origin files in the page cache
  bool allow_stale = false;
  BenchOutputs outputs;
};

void setup_bench_loader(CLI::App& bench, CliContext& ctx);
void run_bench_loader(const BenchLoaderOptions& opts, const CliContext& ctx);

}  // namespace ddstage::cli
