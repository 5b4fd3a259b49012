// Sizes for people, in the one convention the CLI and the logs share.
#pragma once

#include <string>

namespace ddstage {

/// "512 B", "12.3 KiB", "1.0 GiB": binary units, as the sizes people type are (settings,
/// --mem-limit), so 1 GiB given shows as 1.0 GiB, not 1.1 GB. The unit is chosen after
/// rounding: 1048575 bytes is "1.0 MiB", never "1024.0 KiB".
std::string human_bytes(double bytes);

}  // namespace ddstage
