// `ddstage bench fabric-raw`: the raw fi_read loop, the floor under every fabric read, per row
// size and batch; bench store puts its fabric cells next to the same floor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_report.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/fabric_floor.hpp"
#include "support/cli_context.hpp"

namespace ddstage::detail {
class MpiSession;
}

namespace ddstage::cli {

void setup_bench_fabric_raw(CLI::App& bench, CliContext& ctx);

/// One measured point of the floor.
struct FloorPoint {
  uint64_t row_bytes = 0;
  uint64_t batch = 0;
  FabricFloorRun run;
};

/// Collective over the job: runs read, on rank 0, with a reader of a floor target on rank 1
/// (job of two or more ranks: every other rank waits without spinning until rank 0 is done)
/// or in this process (no job, or one rank). The target holds room for rows of row_sizes.
/// Whatever read measures next to the floor sees the target's rank and the others in the same
/// state as the floor does. Rank 0's error, or rank 1's failing to serve, is thrown on every
/// rank.
void with_fabric_floor(const Settings& settings, const detail::MpiSession* job,
                       const std::vector<uint64_t>& row_sizes,
                       const std::function<void(FabricFloorReader&)>& read);

/// Reads rows at row_bytes untimed, so that connections (rxm connects lazily) and first touches
/// land before the first timed call.
void warm_fabric_floor(FabricFloorReader& reader, uint64_t row_bytes, uint64_t rows, uint64_t seed);

/// A report cell of a floor point: its figures under these dims.
BenchCell floor_cell(const FloorPoint& p, std::vector<std::pair<std::string, BenchDim>> dims);

}  // namespace ddstage::cli
