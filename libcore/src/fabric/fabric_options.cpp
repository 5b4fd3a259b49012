#include "fabric/fabric_options.hpp"

#include "ddstage/error.hpp"

namespace ddstage::detail {

FabricOptions FabricOptions::from(const Settings& settings) {
  FabricOptions o;
  o.provider = settings.get_string("fabric.provider");
  o.domain = settings.get_string("fabric.domain");
  const int64_t window = settings.get_int("fabric.window");
  if (window < 1)
    throw UsageError("fabric.window must be at least 1, not " + std::to_string(window));
  o.window = static_cast<std::size_t>(window);
  o.max_bytes_in_flight = settings.get_size("fabric.inflight_bytes");
  o.read_timeout = settings.get_duration("read_timeout");
  // The settings table admits only these three.
  const std::string& progress = settings.get_string("fabric.progress");
  o.progress = progress == "spin"    ? FabricProgress::spin
               : progress == "sleep" ? FabricProgress::sleep
                                     : FabricProgress::adaptive;
  o.spin = settings.get_duration("fabric.spin");
  return o;
}

}  // namespace ddstage::detail
