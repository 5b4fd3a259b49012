// What every subcommand shares: global flags, resolved settings, logging.
#pragma once

#include <map>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "ddstage/settings.hpp"

namespace ddstage::cli {

/// Global options (before or after the subcommand) and the settings they resolve to.
struct CliContext {
  int verbose = 0;
  bool quiet = false;
  std::string config;
  /// Setting key -> value for flags a subcommand maps onto settings (e.g. --threads).
  std::map<std::string, std::string> setting_flags;
  /// The process's arguments, for MPI_Init in `serve`.
  int* argc = nullptr;
  char*** argv = nullptr;

  /// Flags > DDSTAGE_* env > config file > defaults; also sets the log level. -q makes
  /// log.level error and progress never, as flags.
  Settings resolve_settings() const;

  /// A line on stdout about what was done ("loaded 'x': ..."); -q drops it.
  template <typename... Args>
  void note(fmt::format_string<Args...> format, Args&&... args) const {
    if (!quiet) fmt::print(format, std::forward<Args>(args)...);
  }
};

/// Declares -v/-q/--config on app.
void add_global_options(CLI::App& app, CliContext& ctx);

/// Maps a CLI11 option onto a setting: when given, its value lands in ctx.setting_flags[key].
CLI::Option* add_setting_option(CLI::App& app, CliContext& ctx, const std::string& flag,
                                const std::string& key, const std::string& help);

/// Threads to use: the "threads" setting, 0 meaning one per core.
unsigned thread_count(const Settings& settings);

}  // namespace ddstage::cli
