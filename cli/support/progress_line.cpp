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

namespace {

/// "12.3 MiB/45.6 GiB (27%)  1234/5678 samples": by bytes when the total is known, the ETA then
/// following bytes (rows of a 12 KiB field and of an 8-byte label cost alike per item, not per
/// byte); else by samples or items.
std::string done_text(const ProgressUpdate& p) {
  const auto percent = [](uint64_t done, uint64_t total) {
    return fmt::format(" ({:.0f}%)",
                       100.0 * static_cast<double>(done) / static_cast<double>(total));
  };
  std::string text;
  if (p.total_bytes) {
    text = human_bytes(static_cast<double>(p.bytes_done)) + "/" +
           human_bytes(static_cast<double>(p.total_bytes)) + percent(p.bytes_done, p.total_bytes);
  }
  if (p.total_samples) {
    text +=
        fmt::format("{}{}/{} samples", text.empty() ? "" : "  ", p.samples_done, p.total_samples);
    if (!p.total_bytes) text += percent(p.samples_done, p.total_samples);
  } else {
    text += std::to_string(p.items_done);
    if (p.total_items)
      text += fmt::format("/{}", p.total_items) + percent(p.items_done, p.total_items);
  }
  return text;
}

/// Fraction done of what the ETA extrapolates: bytes, else samples, else items; 0 if unknown.
double fraction_done(const ProgressUpdate& p) {
  const auto ratio = [](uint64_t done, uint64_t total) {
    return total ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  };
  if (p.total_bytes) return ratio(p.bytes_done, p.total_bytes);
  if (p.total_samples) return ratio(p.samples_done, p.total_samples);
  return ratio(p.items_done, p.total_items);
}

}  // namespace

void ProgressLine::operator()(const ProgressUpdate& p) const {
  if (!m_enabled) return;
  const double secs = std::max(p.seconds, 1e-9);
  const uint64_t count = p.total_samples ? p.samples_done : p.items_done;
  std::string line = fmt::format("{}: {}  {:.0f}/s  {}/s", m_label, done_text(p),
                                 static_cast<double>(count) / secs,
                                 human_bytes(static_cast<double>(p.bytes_done) / secs));
  const double done = fraction_done(p);
  if (p.final) {
    line += "  in " + human_seconds(p.seconds);
  } else if (done > 0 && done < 1) {
    line += "  ETA " + human_seconds(p.seconds * (1 - done) / done);
  }
  fmt::print(stderr, "\r{:<78}{}", line, p.final ? "\n" : "");
  std::fflush(stderr);
}

std::string human_seconds(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  auto s = static_cast<long>(seconds);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

}  // namespace ddstage::cli
