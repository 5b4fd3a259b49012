#include "support/progress_line.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "ddstage/error.hpp"

namespace ddstage::cli {

ProgressLine::ProgressLine(std::string label, const Settings& settings)
    : m_label(std::move(label)) {
  const auto& mode = settings.get_string("progress");  // validated: auto, always or never
  m_enabled = mode == "auto" ? ::isatty(STDERR_FILENO) == 1 : mode == "always";
}

void ProgressLine::operator()(const ProgressUpdate& p) const {
  if (!m_enabled) return;
  const double secs = std::max(p.seconds, 1e-9);
  const double rate = static_cast<double>(p.items_done) / secs;
  std::string line = fmt::format("{}: {}", m_label, p.items_done);
  if (p.total_items) {
    line +=
        fmt::format("/{} ({:.0f}%)", p.total_items,
                    100.0 * static_cast<double>(p.items_done) / static_cast<double>(p.total_items));
  }
  line +=
      fmt::format("  {:.0f}/s  {}/s", rate, human_bytes(static_cast<double>(p.bytes_done) / secs));
  if (p.final) {
    line += "  in " + human_seconds(p.seconds);
  } else if (p.total_items && rate > 0) {
    line += "  ETA " + human_seconds(static_cast<double>(p.total_items - p.items_done) / rate);
  }
  fmt::print(stderr, "\r{:<78}{}", line, p.final ? "\n" : "");
  std::fflush(stderr);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  return u ? fmt::format("{:.1f} {}", bytes, units[u]) : fmt::format("{:.0f} {}", bytes, units[u]);
}

std::string human_seconds(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  auto s = static_cast<long>(seconds);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

}  // namespace ddstage::cli
