#include "support/cli_context.hpp"

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"

namespace ddstage::cli {
Settings CliContext::resolve_settings() const {
  auto flags = setting_flags;
  if (quiet) {
    flags["log.level"] = "error";
    flags["progress"] = "never";
  }
  if (verbose == 1) flags["log.level"] = "debug";
  if (verbose > 1) flags["log.level"] = "trace";
  std::optional<std::filesystem::path> path;
  if (!config.empty()) {
    path = config;
  } else if (auto p = default_config_path(); !p.empty()) {
    path = p;
  }
  auto settings = Settings::resolve(flags, environment_settings(), path, !config.empty());
  spdlog::set_level(
      spdlog::level::from_str(settings.get_string("log.level")));  // validated by resolve
  // DDSTAGE_PROFILE reaches libcore as this setting, for every command, not only those that
  // open a Client or Store.
  profile::configure(settings.get_string("profile"));
  return settings;
}

void add_global_options(CLI::App& app, CliContext& ctx) {
  app.add_flag("-v,--verbose", ctx.verbose, "More log output (repeat for trace)");
  app.add_flag("-q,--quiet", ctx.quiet,
               "Print only errors: no progress line, no logs, no lines about what was done. What "
               "a command exists to print still is: read's samples, info's and status's report, "
               "clean --dry-run's list, a --json document");
  app.add_option("--config", ctx.config,
                 "YAML config file (default $XDG_CONFIG_HOME/ddstage/config.yaml)");
}

CLI::Option* add_setting_option(CLI::App& app, CliContext& ctx, const std::string& flag,
                                const std::string& key, const std::string& help) {
  return app.add_option_function<std::string>(
      flag, [&ctx, key](const std::string& v) { ctx.setting_flags[key] = v; }, help);
}

unsigned thread_count(const Settings& settings) {
  auto n = settings.get_int("threads");
  if (n < 0 || n > 1024)
    throw UsageError("threads must be 0 to 1024 (0: one per core), not " + std::to_string(n));
  return n > 0 ? static_cast<unsigned>(n) : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ddstage::cli
