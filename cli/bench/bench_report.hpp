// One output for every `ddstage bench`: what ran where, and one cell per measured combination,
// written as an aligned table on stdout, JSON, CSV and a gnuplot plot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>

#include "ddstage/latency_histogram.hpp"

namespace ddstage::cli {

/// The "schema" of every bench JSON (store, origin, fabric-raw, loader, flatten, load): its
/// layout's name and version, raised when a field is renamed, removed or changes meaning
/// (ddstage-bench(1) lists what each version changed) so that a script can refuse a layout it
/// does not know.
inline constexpr std::string_view bench_json_schema = "ddstage-bench/2";

/// A cell's coordinate on one dimension: a count (row_bytes, batch, threads) or a name
/// (transport, mode, sharing, dest).
using BenchDim = std::variant<uint64_t, std::string>;

/// One measured combination of a bench's matrix.
struct BenchCell {
  /// Coordinates in column order, e.g. {"transport","shm"}, {"row_bytes",3072}, {"batch",128}.
  std::vector<std::pair<std::string, BenchDim>> dims;
  uint64_t rows = 0;   ///< rows (samples, steps) the cell read
  uint64_t bytes = 0;  ///< bytes it read
  double seconds = 0;  ///< wall time of the whole cell (all its threads)
  /// Per call, its time divided by its rows, in nanoseconds: the µs/row tail.
  LatencyHistogram ns_per_row;
  /// Figures particular to a bench (ratio to a floor, mismatches), in column order.
  std::vector<std::pair<std::string, double>> extras;
  /// Text printed under the table for this cell (e.g. a read profile); also in the JSON.
  std::string detail;
  /// The read profile's stages (bench store --profile), each with its figures: the JSON
  /// object "profile" {stage: {figure: value}}.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> profile;

  double gb_per_s() const noexcept {
    return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  }
  /// Adds other's rows, bytes, seconds and per-call figures (a cell measured in parts; other's
  /// dims, extras and profile are not looked at).
  void merge(const BenchCell& other);
  /// The extra figure `name`, if the cell has it.
  std::optional<double> extra(std::string_view name) const noexcept;
  /// The coordinate on `name`, or nullptr.
  const BenchDim* dim(std::string_view name) const noexcept;
  /// "shm get_batch 3072 128": the coordinates, space-separated.
  std::string label(std::string_view skip = {}) const;
};

/// One panel of a plot. As lines against a count, its first figure per series; as bars for
/// categories, per cell a bar for each figure, labelled with the value and, with ratio, the
/// value over the same figure of the first cell (the run's baseline).
struct PlotPanel {
  std::string title;  ///< what the panel shows, with its unit
  /// (figure, legend): a figure as named in the CSV (mean_us, gb_per_s, seconds, an extra).
  std::vector<std::pair<std::string, std::string>> figures;
  double scale = 1;  ///< drawn as figure x scale (100: a fraction in %, 1000: GB/s as MB/s)
  bool ratio = true;
};

/// Where a bench writes besides stdout; declared by add_bench_output_options.
struct BenchOutputs {
  std::string json;  ///< everything
  std::string csv;   ///< one line per cell, with a header line
  std::string plot;  ///< .png or .svg, drawn by gnuplot
  /// Fails before any measuring (UsageError): a plot path that is neither .png nor .svg, or
  /// no gnuplot on PATH (naming the Debian package gnuplot-nox).
  void check() const;
};

/// Adds --json, --csv and --plot to a bench subcommand.
void add_bench_output_options(CLI::App& sub, BenchOutputs& out);

/// Cells and the run's description, printed and written in every format.
class BenchReport {
 public:
  /// bench: the subcommand ("store", "fabric-raw"); unit: what a latency is per ("row",
  /// "sample", "step"). The description starts with host, cores, kernel and CPU model.
  explicit BenchReport(std::string bench, std::string unit = "row");

  /// Appends a line to the run's description (ranks, transports, providers, sizes, seed).
  void describe(std::string key, std::string value);
  /// Appends a cell; the reference stays valid until the next add.
  BenchCell& add(BenchCell cell);
  /// A conclusion printed after the table (a ratio against a floor) and kept in the JSON.
  void note(std::string text);
  /// The dimension the plot puts on its x axis (default row_bytes, log scale).
  void set_plot_x(std::string dim) { m_plot_x = std::move(dim); }
  /// The plot's panels, side by side; by default mean latency and GB/s.
  void set_panels(std::vector<PlotPanel> panels) { m_panels = std::move(panels); }

  const std::vector<BenchCell>& cells() const noexcept { return m_cells; }
  /// The first cell whose coordinates include every one of `dims`, or nullptr.
  const BenchCell* find(const std::vector<std::pair<std::string, BenchDim>>& dims) const;

  /// The description, the table, then each cell's detail and the notes, on stdout.
  void print() const;
  std::string json() const;
  std::string csv() const;
  /// Writes the outputs asked for (files atomically; the plot through gnuplot).
  void write(const BenchOutputs& out) const;

 private:
  std::vector<std::string> dim_names() const;
  std::vector<std::string> extra_names() const;
  /// Draws through gnuplot into a temporary file renamed to path when complete.
  void plot(const std::string& path) const;
  /// The gnuplot script drawing path's format into output.
  std::string plot_script(const std::string& path, const std::string& output) const;
  /// Lines against the numeric x dimension: one colour per value of the first other
  /// dimension that varies, one line style per combination of the rest; one panel each.
  std::string line_plot() const;
  /// One bar per cell and figure, the panels of m_panels side by side.
  std::string bar_plot() const;

  std::string m_bench;
  std::string m_unit;
  std::string m_plot_x = "row_bytes";
  std::vector<PlotPanel> m_panels;
  std::vector<std::pair<std::string, std::string>> m_description;
  std::vector<BenchCell> m_cells;
  std::vector<std::string> m_notes;
};

}  // namespace ddstage::cli
