#include "bench/bench_report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/host_name.hpp"
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
    out += std::holds_alternative<uint64_t>(v) ? k + "=" + dim_text(v) : dim_text(v);
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
                 "Draw µs/row and GB/s against row size with gnuplot (FILE.png or FILE.svg)");
}

BenchReport::BenchReport(std::string bench, std::string unit)
    : m_bench(std::move(bench)), m_unit(std::move(unit)) {
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
  std::vector<std::string> header(dims);
  for (const char* h : {"rows", "GB/s", "mean_us", "p50_us", "p99_us", "p99.9_us", "max_us"})
    header.emplace_back(h);
  header.insert(header.end(), extras.begin(), extras.end());
  std::vector<std::vector<std::string>> rows{header};
  for (const auto& c : m_cells) {
    auto& row = rows.emplace_back();
    for (const auto& d : dims) row.push_back(c.dim(d) ? dim_text(*c.dim(d)) : "-");
    row.push_back(std::to_string(c.rows));
    row.push_back(fmt::format("{:.3f}", c.gb_per_s()));
    for (const auto& f : latency_figures(c)) row.push_back(fmt::format("{:.3f}", f.second));
    for (const auto& e : extras)
      row.push_back(c.extra(e) ? fmt::format("{:.3f}", *c.extra(e)) : "-");
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  fmt::print("latencies in µs per {} (each call's time / its {}s)\n", m_unit, m_unit);
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
  std::vector<std::string> header(dims);
  for (const char* h : {"rows", "bytes", "seconds", "gb_per_s", "calls", "mean_us", "p50_us",
                        "p99_us", "p999_us", "max_us"}) {
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
    fields.push_back(std::to_string(c.ns_per_row.count()));
    for (const auto& f : latency_figures(c)) fields.push_back(fmt::format("{:.6g}", f.second));
    for (const auto& e : extras)
      fields.push_back(c.extra(e) ? fmt::format("{:.6g}", *c.extra(e)) : "");
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

// Series are the cells that differ only in the x coordinate; with no numeric x coordinate every
// cell is one point of a single series, labelled on the x axis.
std::string BenchReport::plot_script(const std::string& path, const std::string& output) const {
  const bool by_x =
      !m_cells.empty() && std::all_of(m_cells.begin(), m_cells.end(), [this](const BenchCell& c) {
        const auto* x = c.dim(m_plot_x);
        return x && std::holds_alternative<uint64_t>(*x);
      });
  std::map<std::string, std::vector<const BenchCell*>> series;
  std::vector<std::string> order;
  for (const auto& c : m_cells) {
    const auto key = by_x ? c.label(m_plot_x) : std::string("cells");
    if (!series.count(key)) order.push_back(key);
    series[key].push_back(&c);
  }
  std::string data;
  for (std::size_t s = 0; s < order.size(); ++s) {
    auto& cells = series[order[s]];
    if (by_x) {
      std::stable_sort(cells.begin(), cells.end(), [this](const BenchCell* a, const BenchCell* b) {
        return std::get<uint64_t>(*a->dim(m_plot_x)) < std::get<uint64_t>(*b->dim(m_plot_x));
      });
    }
    data += fmt::format("$s{} << EOD\n", s);
    for (const auto* c : cells) {
      const auto x = by_x ? dim_text(*c->dim(m_plot_x)) : gp_string(c->label());
      data += fmt::format("{} {:.6g} {:.6g}\n", x, c->ns_per_row.mean() / 1e3, c->gb_per_s());
    }
    data += "EOD\n";
  }
  auto plot_line = [&](int column) {
    std::string cmd = "plot ";
    for (std::size_t s = 0; s < order.size(); ++s) {
      cmd += fmt::format("{}$s{} using {} with linespoints title {}", s ? ", " : "", s,
                         by_x ? fmt::format("1:{}", column) : fmt::format("0:{}:xtic(1)", column),
                         gp_string(by_x ? order[s] : m_bench));
    }
    return cmd + "\n";
  };
  std::string script =
      fmt::format("set terminal {}\nset output {}\n", terminal_for(path), gp_string(output));
  script += data;
  script += fmt::format(
      "set multiplot layout 1,2 title {}\n",
      gp_string(fmt::format("ddstage bench {} on {}", m_bench, m_description.front().second)));
  script += "set grid\nset key top left font ',8'\nset logscale y\n";
  if (by_x) {
    // Padded by a factor of 2 each side: a single row size still gets an x range.
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& c : m_cells) {
      lo = std::min(lo, std::get<uint64_t>(*c.dim(m_plot_x)));
      hi = std::max(hi, std::get<uint64_t>(*c.dim(m_plot_x)));
    }
    script +=
        fmt::format("set logscale x 2\nset format x '%.0b%B'\nset xrange [{}:{}]\nset xlabel {}\n",
                    static_cast<double>(lo) / 2, static_cast<double>(hi) * 2, gp_string(m_plot_x));
  } else {
    script += "set xtics rotate by -30\n";
  }
  script += fmt::format("set ylabel {}\n", gp_string(fmt::format("µs per {} (mean)", m_unit))) +
            plot_line(2);
  return script + "set ylabel 'GB/s'\n" + plot_line(3) + "unset multiplot\n";
}

}  // namespace ddstage::cli
