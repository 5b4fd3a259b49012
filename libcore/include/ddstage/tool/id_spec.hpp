// Parsing of --ids: "0,7,10-19" or "@FILE".
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ddstage {

/// Parses comma-separated ids and inclusive ranges ("0,7,10-19"), or "@FILE" with one id per
/// line (blank lines and '#' comments skipped). Order is kept; repeats are allowed. Every id
/// must be < limit. Throws UsageError naming the bad token or id.
std::vector<uint64_t> parse_ids(std::string_view spec, uint64_t limit);

}  // namespace ddstage
