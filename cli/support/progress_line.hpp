// A one-line progress display on stderr for long operations.
#pragma once

#include <string>

#include "ddstage/settings.hpp"
#include "ddstage/tool/human_bytes.hpp"  // the sizes this line and the commands print
#include "ddstage/tool/index_writer.hpp"

namespace ddstage::cli {

/// Renders ProgressUpdates as "\rLABEL: done/total (P%)  [samples]  N/s  X MiB/s  ETA" on stderr,
/// when the "progress" setting says so (auto: only when stderr is a terminal). The ETA follows
/// bytes when their total is known.
class ProgressLine {
 public:
  ProgressLine(std::string label, const Settings& settings);
  void operator()(const ProgressUpdate& p) const;
  bool enabled() const noexcept { return m_enabled; }

 private:
  std::string m_label;
  bool m_enabled;
};

/// "1m05s", "3.2s".
std::string human_seconds(double seconds);

}  // namespace ddstage::cli
