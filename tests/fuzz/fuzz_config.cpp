// The config file (--config, or $XDG_CONFIG_HOME/ddstage/config.yaml; libcore/src/settings.cpp),
// read by every command before it does anything.
#include <cstddef>
#include <cstdint>
#include <span>

#include "settings_contract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto path = fuzz::scratch_dir() / "config.yaml";
  fuzz::write_file(path, std::span(data, size));
  fuzz::expect_clean([&] { fuzz::check_settings_contract(Settings::resolve({}, {}, path, true)); });
  return 0;
}
