#include "settings_of.hpp"

#include <algorithm>
#include <optional>

#include "ddstage/error.hpp"

namespace ddstage::python {

Settings settings_of(const std::map<std::string, std::string>& given) {
  const auto table = setting_table();
  for (const auto& [key, value] : given) {
    if (std::none_of(table.begin(), table.end(),
                     [&](const SettingDef& d) { return d.key == key; })) {
      std::string known;
      for (const auto& d : table) known += (known.empty() ? "" : ", ") + std::string(d.key);
      throw UsageError("unknown setting '" + key + "' (known: " + known + ")");
    }
  }
  std::optional<std::filesystem::path> config;
  if (auto p = default_config_path(); !p.empty()) config = p;
  return Settings::resolve(given, environment_settings(), config, false);
}

}  // namespace ddstage::python
