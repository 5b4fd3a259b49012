#include "bench/bench_report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/host_name.hpp"
#include "ddstage/tool/human_bytes.hpp"
#include "support/json_writer.hpp"
#include "support/output_file.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;

/// A private temporary file (mkstemps in $TMPDIR), removed on destruction.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    std::error_code ec;
    auto dir = fs::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    m_path = (dir / ("ddstage-scratch-XXXXXX" + suffix)).string();
    const int fd = ::mkstemps(m_path.data(), static_cast<int>(suffix.size()));
    if (fd < 0) throw IoError("cannot create a scratch file in " + dir.string(), errno);
    m_fd = FileDescriptor(fd, m_path);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { ::unlink(m_path.c_str()); }
  const std::string& path() const noexcept { return m_path; }
  const FileDescriptor& fd() const noexcept { return m_fd; }

 private:
  std::string m_path;
  FileDescriptor m_fd;
};

std::string dim_text(const BenchDim& d) {
  return std::visit([](const auto& v) { return fmt::format("{}", v); }, d);
}

/// A coordinate in a label: a count with its name ("batch=128"), a name alone ("shm").
std::string dim_label(const std::string& name, const BenchDim& d) {
  return std::holds_alternative<uint64_t>(d) ? name + "=" + dim_text(d) : dim_text(d);
}

double us(uint64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

/// The latency figures every cell has, in column order, in µs per unit.
std::vector<std::pair<std::string, double>> latency_figures(const BenchCell& c) {
  const auto& h = c.ns_per_row;
  return {{"mean_us", h.mean() / 1e3},
          {"p50_us", us(h.percentile(0.50))},
          {"p99_us", us(h.percentile(0.99))},
          {"p999_us", us(h.percentile(0.999))},
          {"max_us", us(h.max())}};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string quoted = "\"";
  for (char c : v) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + '"';
}

/// Counts (bytes, blocks) in full, other figures to 6 significant digits.
std::string csv_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}

/// A gnuplot single-quoted string: the only escape is '' for '.
std::string gp_string(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const auto dir = dirs.substr(0, colon);
    if (::access((fs::path(dir.empty() ? "." : dir) / program).c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return false;
}

std::string terminal_for(const std::string& path) {
  const auto ext = fs::path(path).extension().string();
  if (ext == ".png") return "pngcairo size 1600,700 noenhanced";
  if (ext == ".svg") return "svg size 1600,700 noenhanced";
  throw UsageError("--plot " + path + ": the file must end in .png or .svg");
}

/// Colours told apart in print and by most colour-blind readers (Okabe-Ito, then two more).
constexpr std::array<const char*, 9> palette{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                             "#56B4E9", "#000000", "#882255", "#999999"};
/// Filled and open shapes, each distinct at a glance.
constexpr std::array<int, 10> point_types{7, 5, 9, 11, 13, 6, 4, 8, 10, 12};

/// "row_bytes" as an axis title: "row bytes".
std::string axis_name(std::string name) {
  std::replace(name.begin(), name.end(), '_', ' ');
  return name;
}

/// A figure as named in the CSV, or none where the cell lacks it.
std::optional<double> figure_of(const BenchCell& c, std::string_view name) {
  if (name == "gb_per_s") return c.gb_per_s();
  if (name == "seconds") return c.seconds;
  for (const auto& [k, v] : latency_figures(c)) {
    if (k == name) return v;
  }
  return c.extra(name);
}

/// Three significant digits without an exponent up to a million: a bar's label.
std::string short_number(double v) {
  if (v >= 1e6 || (v != 0 && v < 1e-3)) return fmt::format("{:.2e}", v);
  if (v >= 100) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

/// Cells that differ only in the x coordinate, drawn as one line.
struct LineSeries {
  std::string title;  ///< the coordinates that vary between series
  std::size_t colour = 0;
  std::size_t style = 0;
  std::vector<const BenchCell*> cells;  ///< by x
};

/// The series of cells against the numeric dimension x, in key order. Colour alone cannot tell
/// 15 series apart: the first dimension that varies (the transport, in bench store) picks the
/// colour, the others that vary (batch, threads) the dash and point type. A dimension that
/// takes one value per colour (bench store's mode, set by its transport) adds nothing to the
/// style; series of one colour are listed together.
std::vector<LineSeries> line_series(const std::vector<BenchCell>& cells,
                                    const std::vector<std::string>& names, const std::string& x) {
  auto text = [](const BenchCell& c, const std::string& name) {
    const auto* d = c.dim(name);
    return d ? dim_text(*d) : std::string();
  };
  auto tied_to = [&](const std::string& name, const std::string& by) {
    std::map<std::string, std::string> seen;
    return std::all_of(cells.begin(), cells.end(), [&](const BenchCell& c) {
      return seen.emplace(text(c, by), text(c, name)).first->second == text(c, name);
    });
  };
  std::vector<std::string> varying, styled;
  for (const auto& n : names) {
    if (n != x && !tied_to(n, "")) varying.push_back(n);  // tied to nothing: constant
  }
  for (std::size_t i = 1; i < varying.size(); ++i) {
    if (!tied_to(varying[i], varying[0])) styled.push_back(varying[i]);
  }
  auto label_of = [&](const BenchCell& c, const std::vector<std::string>& over) {
    std::string out;
    for (const auto& n : over) {
      if (const auto* d = c.dim(n)) out += (out.empty() ? "" : " ") + dim_label(n, *d);
    }
    return out;
  };
  std::vector<std::string> colours, styles, keys;
  auto index_of = [](std::vector<std::string>& seen, const std::string& v) {
    const auto at = std::find(seen.begin(), seen.end(), v);
    if (at == seen.end()) seen.push_back(v);
    return static_cast<std::size_t>(std::find(seen.begin(), seen.end(), v) - seen.begin());
  };
  std::vector<LineSeries> series;
  for (const auto& c : cells) {
    const auto s = index_of(keys, c.label(x));
    if (s == series.size()) {
      series.push_back({label_of(c, varying),
                        index_of(colours, varying.empty() ? "" : text(c, varying[0])),
                        index_of(styles, label_of(c, styled)),
                        {}});
    }
    series[s].cells.push_back(&c);
  }
  for (auto& s : series) {
    std::stable_sort(s.cells.begin(), s.cells.end(), [&x](const BenchCell* a, const BenchCell* b) {
      return std::get<uint64_t>(*a->dim(x)) < std::get<uint64_t>(*b->dim(x));
    });
  }
  std::stable_sort(series.begin(), series.end(), [](const LineSeries& a, const LineSeries& b) {
    return std::tie(a.colour, a.style) < std::tie(b.colour, b.style);
  });
  return series;
}

/// The names of the (name, value) pairs members_of(cell) points at, in first-seen order.
template <typename Members>
std::vector<std::string> names_over(const std::vector<BenchCell>& cells, Members members_of) {
  std::vector<std::string> names;
  for (const auto& c : cells) {
    for (const auto& [name, value] : *members_of(c)) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

}  // namespace

void BenchCell::merge(const BenchCell& other) {
  rows += other.rows;
  bytes += other.bytes;
  seconds += other.seconds;
  ns_per_row.merge(other.ns_per_row);
}

std::optional<double> BenchCell::extra(std::string_view name) const noexcept {
  for (const auto& [k, v] : extras) {
    if (k == name) return v;
  }
  return std::nullopt;
}

const BenchDim* BenchCell::dim(std::string_view name) const noexcept {
  for (const auto& [k, v] : dims) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string BenchCell::label(std::string_view skip) const {
  std::string out;
  for (const auto& [k, v] : dims) {
    if (k == skip) continue;
    if (!out.empty()) out += ' ';
    out += dim_label(k, v);
  }
  return out;
}

void BenchOutputs::check() const {
  if (plot.empty()) return;
  terminal_for(plot);
  if (!on_path("gnuplot")) {
    throw UsageError(
        "--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
  }
}

void add_bench_output_options(CLI::App& sub, BenchOutputs& out) {
  sub.add_option("--json", out.json,
                 "Also write every figure and the run's description as JSON to this file");
  sub.add_option("--csv", out.csv,
                 "Also write one line per cell (with a header line) to this CSV file");
  sub.add_option("--plot", out.plot,
                 "Draw the figures with gnuplot (FILE.png or FILE.svg): lines against row size, "
                 "or bars with ratios to the baseline");
}

BenchReport::BenchReport(std::string bench, std::string unit)
    : m_bench(std::move(bench)),
      m_unit(std::move(unit)),
      m_panels{{fmt::format("µs per {} (mean)", m_unit), {{"mean_us", "mean"}}},
               {"GB/s", {{"gb_per_s", "GB/s"}}}} {
  utsname u{};
  ::uname(&u);
  describe("host", host_name());
  describe("cores", std::to_string(std::thread::hardware_concurrency()));
  describe("kernel", fmt::format("{} {}", u.sysname, u.release));
  describe("cpu", cpu_model());
}

void BenchReport::describe(std::string key, std::string value) {
  m_description.emplace_back(std::move(key), std::move(value));
}

BenchCell& BenchReport::add(BenchCell cell) {
  return m_cells.emplace_back(std::move(cell));
}

void BenchReport::note(std::string text) {
  m_notes.push_back(std::move(text));
}

const BenchCell* BenchReport::find(
    const std::vector<std::pair<std::string, BenchDim>>& dims) const {
  for (const auto& c : m_cells) {
    if (std::all_of(dims.begin(), dims.end(), [&c](const auto& d) {
          const auto* v = c.dim(d.first);
          return v && *v == d.second;
        })) {
      return &c;
    }
  }
  return nullptr;
}

std::vector<std::string> BenchReport::dim_names() const {
  return names_over(m_cells, [](const BenchCell& c) { return &c.dims; });
}

std::vector<std::string> BenchReport::extra_names() const {
  return names_over(m_cells, [](const BenchCell& c) { return &c.extras; });
}

void BenchReport::print() const {
  for (const auto& [k, v] : m_description) fmt::print("{}: {}\n", k, v);
  const auto dims = dim_names();
  const auto extras = extra_names();
  // A bench that times no calls and moves no bytes (bench control) shows its own figures only.
  const bool timed = std::any_of(m_cells.begin(), m_cells.end(), [](const BenchCell& c) {
    return c.ns_per_row.count() > 0 || c.bytes > 0;
  });
  std::vector<std::string> header(dims);
  header.emplace_back("rows");
  if (timed) {
    for (const char* h : {"GB/s", "mean_us", "p50_us", "p99_us", "p99.9_us", "max_us"})
      header.emplace_back(h);
  }
  header.insert(header.end(), extras.begin(), extras.end());
  std::vector<std::vector<std::string>> rows{header};
  for (const auto& c : m_cells) {
    auto& row = rows.emplace_back();
    for (const auto& d : dims) row.push_back(c.dim(d) ? dim_text(*c.dim(d)) : "-");
    row.push_back(std::to_string(c.rows));
    if (timed) {
      row.push_back(fmt::format("{:.3f}", c.gb_per_s()));
      for (const auto& f : latency_figures(c)) row.push_back(fmt::format("{:.3f}", f.second));
    }
    for (const auto& e : extras)
      row.push_back(c.extra(e) ? fmt::format("{:.3f}", *c.extra(e)) : "-");
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  if (timed) fmt::print("latencies in µs per {} (each call's time / its {}s)\n", m_unit, m_unit);
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      // Names left, figures right: numbers line up on their last digit.
      line += i < dims.size() ? fmt::format("{:<{}}  ", row[i], width[i])
                              : fmt::format("{:>{}}  ", row[i], width[i]);
    }
    fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
  }
  for (const auto& c : m_cells) {
    if (!c.detail.empty())
      fmt::print("\n{}:\n{}", c.label(), c.detail.back() == '\n' ? c.detail : c.detail + '\n');
  }
  if (!m_notes.empty()) fmt::print("\n");
  for (const auto& n : m_notes) fmt::print("{}\n", n);
}

std::string BenchReport::json() const {
  JsonWriter j;
  j.begin_object().field("schema", bench_json_schema).field("bench", m_bench);
  j.field("unit", m_unit).key("run").begin_object();
  for (const auto& [k, v] : m_description) j.field(k, v);
  j.end_object().key("cells").begin_array();
  for (const auto& c : m_cells) {
    j.begin_object().key("dims").begin_object();
    for (const auto& dim : c.dims) {
      std::visit([&j, &dim](const auto& x) { j.field(dim.first, x); }, dim.second);
    }
    j.end_object().field("rows", c.rows).field("bytes", c.bytes).field("seconds", c.seconds);
    j.field("gb_per_s", c.gb_per_s()).field("calls", c.ns_per_row.count());
    for (const auto& [k, v] : latency_figures(c)) j.field(k, v);
    j.field("min_us", us(c.ns_per_row.min()));
    for (const auto& [k, v] : c.extras) j.field(k, v);
    if (!c.detail.empty()) j.field("detail", c.detail);
    if (!c.profile.empty()) {
      j.key("profile").begin_object();
      for (const auto& [stage, figures] : c.profile) {
        j.key(stage).begin_object();
        for (const auto& [k, v] : figures) j.field(k, v);
        j.end_object();
      }
      j.end_object();
    }
    j.end_object();
  }
  j.end_array().key("notes").begin_array();
  for (const auto& n : m_notes) j.value(n);
  j.end_array().end_object();
  return j.str();
}

std::string BenchReport::csv() const {
  const auto dims = dim_names();
  const auto extras = extra_names();
  // Steps timed once each (bench flatten, load) have no per-call latencies to show.
  const bool per_call = std::any_of(m_cells.begin(), m_cells.end(),
                                    [](const BenchCell& c) { return c.ns_per_row.count() > 0; });
  std::vector<std::string> header(dims);
  for (const char* h : {"rows", "bytes", "seconds", "gb_per_s"}) header.emplace_back(h);
  if (per_call) {
    for (const char* h : {"calls", "mean_us", "p50_us", "p99_us", "p999_us", "max_us"})
      header.emplace_back(h);
  }
  header.insert(header.end(), extras.begin(), extras.end());
  auto line = [](const std::vector<std::string>& fields) {
    std::string out;
    for (const auto& f : fields) out += (out.empty() ? "" : ",") + csv_field(f);
    return out + '\n';
  };
  std::string out = line(header);
  for (const auto& c : m_cells) {
    std::vector<std::string> fields;
    for (const auto& d : dims) fields.push_back(c.dim(d) ? dim_text(*c.dim(d)) : "");
    fields.push_back(std::to_string(c.rows));
    fields.push_back(std::to_string(c.bytes));
    fields.push_back(fmt::format("{:.9g}", c.seconds));
    fields.push_back(fmt::format("{:.6g}", c.gb_per_s()));
    if (per_call) {
      fields.push_back(std::to_string(c.ns_per_row.count()));
      for (const auto& f : latency_figures(c)) fields.push_back(fmt::format("{:.6g}", f.second));
    }
    for (const auto& e : extras) fields.push_back(c.extra(e) ? csv_number(*c.extra(e)) : "");
    out += line(fields);
  }
  return out;
}

void BenchReport::write(const BenchOutputs& out) const {
  if (!out.json.empty()) write_text_file(out.json, json());
  if (!out.csv.empty()) write_text_file(out.csv, csv());
  if (!out.plot.empty()) plot(out.plot);
}

void BenchReport::plot(const std::string& path) const {
  // Every mode can be unavailable (bench loader --compare hdf5 on a tree of files).
  if (m_cells.empty())
    throw Error(ErrorKind::runtime, "--plot " + path + ": nothing was measured, nothing to draw");
  // gnuplot writes its output by name, so it draws into a private scratch file whose bytes then
  // go to path as every output does (through a device or FIFO, atomically over a regular file).
  const ScratchFile drawn(fs::path(path).extension().string());
  const auto script = plot_script(path, drawn.path());
  FILE* gp = ::popen("gnuplot", "w");
  if (!gp) throw IoError("popen gnuplot", errno, {.file = path});
  const bool written = std::fwrite(script.data(), 1, script.size(), gp) == script.size();
  const int status = ::pclose(gp);
  if (!written || status != 0) {
    throw Error(ErrorKind::runtime,
                fmt::format("gnuplot could not draw {} (exit status {})", path, status));
  }
  std::vector<std::byte> image(drawn.fd().size());
  drawn.fd().pread_exact(image, 0);
  OutputFile out(path);
  out.write(image);
  out.commit();
}

std::string BenchReport::plot_script(const std::string& path, const std::string& output) const {
  const bool by_x =
      !m_cells.empty() && std::all_of(m_cells.begin(), m_cells.end(), [this](const BenchCell& c) {
        const auto* x = c.dim(m_plot_x);
        return x && std::holds_alternative<uint64_t>(*x);
      });
  std::string script =
      fmt::format("set terminal {}\nset output {}\n", terminal_for(path), gp_string(output));
  script += fmt::format(
      "set multiplot layout 1,{} title {}\n", m_panels.size(),
      gp_string(fmt::format("ddstage bench {} on {}", m_bench, m_description.front().second)));
  return script + (by_x ? line_plot() : bar_plot()) + "unset multiplot\n";
}

std::string BenchReport::line_plot() const {
  const auto series = line_series(m_cells, dim_names(), m_plot_x);
  std::string script;
  for (std::size_t s = 0; s < series.size(); ++s) {
    script += fmt::format("$s{} << EOD\n", s);
    for (const auto* c : series[s].cells) {
      script += dim_text(*c->dim(m_plot_x));
      for (const auto& panel : m_panels) {
        script += fmt::format(" {:.6g}",
                              figure_of(*c, panel.figures.front().first).value_or(0) * panel.scale);
      }
      script += "\n";
    }
    script += "EOD\n";
  }
  // Padded by a factor of 2 each side: a single x value still gets a range.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& c : m_cells) {
    lo = std::min(lo, std::get<uint64_t>(*c.dim(m_plot_x)));
    hi = std::max(hi, std::get<uint64_t>(*c.dim(m_plot_x)));
  }
  script +=
      fmt::format("set grid\nset xrange [{}:{}]\nset xlabel {}\n", static_cast<double>(lo) / 2,
                  static_cast<double>(hi) * 2, gp_string(axis_name(m_plot_x)));
  // Sizes: a tick at each size measured, in the binary units every size is shown in (gnuplot's
  // own %B would write "kiB"); counts in decimal units at powers of 10.
  if (m_plot_x.ends_with("bytes")) {
    std::set<uint64_t> sizes;
    for (const auto& c : m_cells) sizes.insert(std::get<uint64_t>(*c.dim(m_plot_x)));
    std::vector<std::string> tics;
    for (const auto size : sizes) {
      auto label = human_bytes(static_cast<double>(size));
      if (const auto at = label.find(".0 "); at != std::string::npos) label.erase(at, 2);
      tics.push_back(fmt::format("{} {}", gp_string(label), size));
    }
    script += fmt::format("set logscale x 2\nset xtics ({})\n", fmt::join(tics, ", "));
  } else {
    script += "set logscale x 10\nset format x '%.0s%c'\n";
  }
  // The panels share the left 78% of the width; the key takes the rest, off the data.
  const double gap = 0.07, width = (0.72 - gap * static_cast<double>(m_panels.size() - 1)) /
                                   static_cast<double>(m_panels.size());
  for (std::size_t p = 0; p < m_panels.size(); ++p) {
    const auto& figure = m_panels[p].figures.front().first;
    // A log axis cannot show a zero (a cell timed as a whole has no per-call mean).
    const bool positive = std::all_of(m_cells.begin(), m_cells.end(), [&](const BenchCell& c) {
      return figure_of(c, figure).value_or(0) > 0;
    });
    const double left = 0.06 + static_cast<double>(p) * (width + gap);
    script += fmt::format("set lmargin at screen {:.3f}\nset rmargin at screen {:.3f}\n", left,
                          left + width);
    script +=
        positive ? "set logscale y\nset yrange [*:*]\n" : "unset logscale y\nset yrange [0:*]\n";
    script += p + 1 == m_panels.size()
                  ? "set key at screen 0.79,0.90 left top Left reverse font ',9' spacing 1.1\n"
                  : "unset key\n";
    script += fmt::format("set ylabel {}\nplot ", gp_string(m_panels[p].title));
    for (std::size_t s = 0; s < series.size(); ++s) {
      const auto& [title, colour, style, cells] = series[s];
      script += fmt::format(
          "{}$s{} using 1:{} with linespoints lw 2 ps 1.2 lc rgb '{}' dt {} pt {} title {}",
          s ? ", " : "", s, p + 2, palette[colour % palette.size()], style % 5 + 1,
          point_types[style % point_types.size()], gp_string(title));
    }
    script += "\n";
  }
  return script;
}

// Categories have no order or distance between them: bars, not lines, each printing its value
// and its ratio to the first cell's (the same-run baseline) so the figure needs no table.
std::string BenchReport::bar_plot() const {
  const auto& panels = m_panels;
  const auto& base = m_cells.front();
  std::string tics;
  for (std::size_t i = 0; i < m_cells.size(); ++i)
    tics += fmt::format("{}{} {}", i ? ", " : "", gp_string(m_cells[i].label()), i);
  std::string script = fmt::format(
      "set style fill solid 0.85 border -1\nset grid ytics\nset xtics ({}) scale 0 font ',11'\n"
      "set xrange [-0.6:{}]\nset offsets 0,0,graph 0.22,0\nset bmargin 5\n"
      "set key outside bottom center horizontal Left reverse samplen 2\n",
      tics, static_cast<double>(m_cells.size()) - 0.4);
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const auto& panel = panels[p];
    const double width = 0.8 / static_cast<double>(panel.figures.size());
    std::string plot = "plot ";
    double top = 0;
    for (std::size_t f = 0; f < panel.figures.size(); ++f) {
      const auto& [name, legend] = panel.figures[f];
      const auto block = fmt::format("$p{}f{}", p, f);
      script += block + " << EOD\n";
      const double base_value = figure_of(base, name).value_or(0);
      for (const auto& c : m_cells) top = std::max(top, figure_of(c, name).value_or(0));
      for (std::size_t i = 0; i < m_cells.size(); ++i) {
        const double v = figure_of(m_cells[i], name).value_or(0);
        const auto ratio = i == 0           ? std::string("baseline")
                           : base_value > 0 ? short_number(v / base_value) + "x"
                                            : std::string("-");
        const double x = static_cast<double>(i) +
                         (static_cast<double>(f) - (panel.figures.size() - 1) / 2.0) * width;
        script += fmt::format("{:.4f} {:.6g} \"{}\" \"{}\"\n", x, v * panel.scale,
                              short_number(v * panel.scale), ratio);
      }
      script += "EOD\n";
      plot += fmt::format(
          "{}{} using 1:2 with boxes lc rgb '{}' title {}, {} using 1:2:{} with labels center "
          "offset 0,{} font ',10' notitle",
          f ? ", " : "", block, palette[f % palette.size()], gp_string(legend), block,
          panel.ratio ? "(sprintf(\"%s\\n%s\", strcol(3), strcol(4)))" : "(strcol(3))",
          panel.ratio ? 1.6 : 0.8);
    }
    // All zero (no step waited a second): a range of its own, as gnuplot has none to take.
    script += top > 0 ? "set yrange [0:*]\n" : "set yrange [0:1]\n";
    script += fmt::format("set boxwidth {:.4f}\n{} key\n", width * 0.9,
                          panel.figures.size() > 1 ? "set" : "unset");
    script += fmt::format(
        "set title {}\nset ylabel {}\n{}\n",
        gp_string(panel.ratio ? panel.title + ", with the ratio to " + base.label() : panel.title),
        gp_string(panel.title), plot);
  }
  return script;
}

}  // namespace ddstage::cli
