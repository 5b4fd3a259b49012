// What resolved Settings promise: every value was type-checked when it came in, so the typed
// getters (which dereference their parse) always have a value to return.
#pragma once

#include <string>

#include "ddstage/settings.hpp"
#include "fuzz_support.hpp"

namespace ddstage::fuzz {

inline void check_settings_contract(const Settings& settings) {
  for (const auto& d : setting_table()) {
    switch (d.type) {
      case SettingType::boolean:
        settings.get_bool(d.key);
        break;
      case SettingType::integer:
        settings.get_int(d.key);
        break;
      case SettingType::size:
        settings.get_size(d.key);
        break;
      case SettingType::string:
        settings.get_string(d.key);
        break;
      case SettingType::duration:
        if (settings.get_duration(d.key).count() < 0)
          violated("negative duration for " + std::string(d.key));
        break;
    }
  }
}

}  // namespace ddstage::fuzz
