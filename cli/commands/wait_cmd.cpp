#include "commands/wait_cmd.hpp"

#include <set>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/store_wait.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

struct WaitCmdOptions {
  std::string store;
  std::string timeout = "60s";
  int64_t pid = 0;
};

void run_wait(const WaitCmdOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
  const auto timeout = parse_duration(opts.timeout);
  if (!timeout)
    throw UsageError("bad --timeout '" + opts.timeout + "' (a duration like 60s, 500ms, 2m)");
  const auto d =
      wait_for_store({dir, *timeout, settings.get_duration("control_timeout"), opts.pid});
  std::set<std::string> hosts;
  for (const auto& r : d.ranks) hosts.insert(r.host);
  ctx.note("store at {} ready: {} rank{} on {} host{}\n", dir, d.ranks.size(),
           d.ranks.size() == 1 ? "" : "s", hosts.size(), hosts.size() == 1 ? "" : "s");
}

}  // namespace

void setup_wait(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<WaitCmdOptions>();
  auto* sub = app.add_subcommand(
      "wait", "Wait until a live store answers at DIR (after `serve &`), then exit 0");
  add_store_option(*sub, opts->store);
  sub->add_option("--timeout", opts->timeout, "Give up (exit 1) after this long: 60s, 500ms, 2m")
      ->capture_default_str();
  sub->add_option("--pid", opts->pid,
                  "The launcher of the serve (e.g. $! after `mpiexec ... serve &`): fail at once "
                  "when it exits")
      ->check(CLI::PositiveNumber);
  sub->callback([opts, &ctx] { run_wait(*opts, ctx); });
}

}  // namespace ddstage::cli
