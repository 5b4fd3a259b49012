// ddstage: wires the subcommands together and turns every error into one line and an exit code.
#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "commands/bench_cmd.hpp"
#include "commands/clean_cmd.hpp"
#include "commands/flatten_cmd.hpp"
#include "commands/info_cmd.hpp"
#include "commands/load_cmd.hpp"
#include "commands/read_cmd.hpp"
#include "commands/serve_cmd.hpp"
#include "commands/status_cmd.hpp"
#include "commands/stop_cmd.hpp"
#include "commands/wait_cmd.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "support/cli_context.hpp"
#include "support/error_line.hpp"

namespace {

constexpr const char* command_list =
    "flatten, info, read, serve, wait, load, status, stop, clean, bench, help";

int unknown_command(const std::string& name) {
  return ddstage::cli::report_error(
      "unknown command '" + name + "' (commands: " + command_list + ")", 2);
}

/// `ddstage [GLOBAL FLAGS] help [CMD [SUB]]` as the arguments of `ddstage ... CMD SUB --help`, so
/// both print the same text; nullopt when this is no help request. A name that is no command
/// (at its level) is a UsageError naming it.
std::optional<std::vector<std::string>> help_arguments(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::size_t i = 1;
  // Global flags may come first; --config takes a value.
  while (i < args.size() && args[i].starts_with("-")) i += args[i] == "--config" ? 2 : 1;
  if (i >= args.size() || args[i] != "help") return std::nullopt;
  args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
  CLI::App* level = &app;
  for (std::size_t w = i; w < args.size() && !args[w].starts_with("-"); ++w) {
    const auto found =
        level->get_subcommands([&](const CLI::App* sub) { return sub->check_name(args[w]); });
    if (found.empty()) {
      throw ddstage::UsageError("unknown command '" + args[w] + "'" +
                                (level == &app ? std::string(" (commands: ") + command_list + ")"
                                               : " (see ddstage help " + level->get_name() + ")"));
    }
    level = found.front();
  }
  args.emplace_back("--help");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  // Writes past RLIMIT_FSIZE must fail with EFBIG (and be cleaned up), not kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  // Thread-safe: rank 0's front desk and a load's progress thread log beside the main thread.
  auto logger = spdlog::stderr_logger_mt("ddstage");
  logger->set_pattern("ddstage: %l: %v");
  spdlog::set_default_logger(logger);

  CLI::App app{
      "ddstage: stage training datasets off the parallel file system.\n"
      "Flatten a dataset once into a byte-offset index, then read samples with one pread each.",
      "ddstage"};
  app.set_version_flag("--version", "ddstage " DDSTAGE_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  app.footer(
      "Exit codes: 0 success, 1 runtime error (I/O, checksum mismatch, stale source), "
      "2 usage error (bad flag, bad id, missing file).\n"
      "Sizes: K, M, G, T, with or without B or iB, are binary multiples (8G = 8GiB = 8 * 2^30, as "
      "Slurm's --mem); sizes are shown as KiB, MiB, GiB.\n"
      "See ddstage(1) and ddstage-<command>(1).");
  ddstage::cli::CliContext ctx;
  ctx.argc = &argc;
  ctx.argv = &argv;
  ddstage::cli::add_global_options(app, ctx);
  ddstage::cli::setup_flatten(app, ctx);
  ddstage::cli::setup_info(app, ctx);
  ddstage::cli::setup_read(app, ctx);
  ddstage::cli::setup_serve(app, ctx);
  ddstage::cli::setup_wait(app, ctx);
  ddstage::cli::setup_load(app, ctx);
  ddstage::cli::setup_status(app, ctx);
  ddstage::cli::setup_stop(app, ctx);
  ddstage::cli::setup_clean(app, ctx);
  ddstage::cli::setup_bench(app, ctx);
  app.add_subcommand("help", "Show help: `ddstage help CMD [SUB]` is `ddstage CMD [SUB] --help`");

  try {
    if (auto args = help_arguments(app, argc, argv)) {
      std::vector<char*> pointers;
      for (auto& a : *args) pointers.push_back(a.data());
      app.parse(static_cast<int>(pointers.size()), pointers.data());
    } else {
      app.parse(argc, argv);
    }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    if (app.get_subcommands().empty() && !app.remaining().empty())
      return unknown_command(app.remaining().front());
    return ddstage::cli::report_error(std::string(e.what()) + " (see ddstage --help)", 2);
  } catch (const std::exception&) {
    return ddstage::cli::report_exception(std::current_exception());
  }
  return 0;
}
