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

/// Runs on the reading process right after each floor point, in the same phase as the floor
/// (the target's rank and every other rank still waiting as they waited for it): what a bench
/// measures against the floor, so that both see the same peers doing the same.
using FloorCompanion = std::function<void(const FloorPoint&)>;

/// The floor for every row size and batch (rows_of(row_bytes) reads each): rank 0 reads a
/// region on rank 1 (job of two or more ranks) or on an endpoint in this process (no job, or one
/// rank). Collective over the job: every rank calls it; ranks other than 0 wait without
/// spinning and get no points. provider: what the reads went over, on rank 0. companion, when
/// given, runs on rank 0 after each point.
std::vector<FloorPoint> measure_fabric_floor(
    const Settings& settings, const detail::MpiSession* job, const std::vector<uint64_t>& row_sizes,
    const std::vector<uint64_t>& batches,
    const std::function<uint64_t(uint64_t row_bytes)>& rows_of, uint64_t seed,
    std::string& provider, const FloorCompanion& companion = {});

/// The same floor read by reader from the target it reaches (a served store's region): warmed
/// up per row size, then every batch, companion after each point.
std::vector<FloorPoint> read_fabric_floor(FabricFloorReader& reader,
                                          const std::vector<uint64_t>& row_sizes,
                                          const std::vector<uint64_t>& batches,
                                          const std::function<uint64_t(uint64_t)>& rows_of,
                                          uint64_t seed, const FloorCompanion& companion = {});

/// A report cell of a floor point: its figures under these dims.
BenchCell floor_cell(const FloorPoint& p, std::vector<std::pair<std::string, BenchDim>> dims);

}  // namespace ddstage::cli
