#include "ddstage/tool/human_bytes.hpp"

#include <fmt/format.h>

namespace ddstage {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  // Bytes print with no decimals, larger units with one: move up while the printed value
  // would reach 1024.
  while (u < 4 && bytes >= (u == 0 ? 1023.5 : 1023.95)) {
    bytes /= 1024;
    ++u;
  }
  return u ? fmt::format("{:.1f} {}", bytes, units[u]) : fmt::format("{:.0f} {}", bytes, units[u]);
}

}  // namespace ddstage
