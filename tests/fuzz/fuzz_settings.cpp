// Settings values from the environment and the command line (libcore/src/settings.cpp): each
// input is a list of (setting, where, value) picks. Sizes also go to parse_size directly, as
// the CLI's size flags do (serve --mem-limit, bench sizes).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "settings_contract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  FuzzedDataProvider in(data, size);
  const auto table = setting_table();
  std::map<std::string, std::string> flags;
  std::map<std::string, std::string> env;
  while (in.remaining_bytes() > 0) {
    const auto& d = table[in.ConsumeIntegralInRange<size_t>(0, table.size() - 1)];
    const bool from_env = in.ConsumeBool();
    const std::string value = in.ConsumeRandomLengthString(64);
    if (from_env) {
      env[d.env_name()] = value;
    } else {
      flags[std::string(d.key)] = value;
    }
    // Whatever a size parses to, its plain spelling parses to the same.
    if (const auto bytes = parse_size(value);
        bytes && parse_size(std::to_string(*bytes)) != bytes) {
      fuzz::violated("size '" + value + "' does not round-trip");
    }
    if (const auto ms = parse_duration(value); ms && ms->count() < 0)
      fuzz::violated("negative duration");
  }
  fuzz::expect_clean(
      [&] { fuzz::check_settings_contract(Settings::resolve(flags, env, std::nullopt, false)); });
  return 0;
}
