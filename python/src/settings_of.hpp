// ddstage settings for Python objects: what the CLI would resolve, without its flags.
#pragma once

#include <map>
#include <string>

#include "ddstage/settings.hpp"

namespace ddstage::python {

/// `given` (setting key -> value, e.g. {"transport": "fabric"}) over the process's DDSTAGE_*
/// environment over the user's config file over the defaults, as the CLI resolves its flags: a
/// Python reader honours the same DDSTAGE_TRANSPORT, DDSTAGE_FABRIC_* and DDSTAGE_READ_TIMEOUT
/// as `ddstage read`.
Settings settings_of(const std::map<std::string, std::string>& given);

}  // namespace ddstage::python
