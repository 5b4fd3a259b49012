#include "commands/stop_cmd.hpp"

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/store_control.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

struct StopOptions {
  std::string store;
};

/// What stop did, one line per fact; the error (exit 1) when some rank may still run.
/// The unreachable ranks' lines stay under -q: they say what to do about the error that follows.
void report_stop(const StopResult& r, const std::string& dir, const CliContext& ctx) {
  for (const auto& file : r.cleaned.removed) ctx.note("removed {}\n", file.path.string());
  if (r.descriptor_removed) ctx.note("removed {}\n", StoreDescriptor::path_in(dir).string());
  if (!r.stopped.empty()) {
    // Rank 0 silent: say whether stop ended ranks or found them already gone (killed, crashed).
    const char* how = r.no_answer.empty()   ? ""
                      : r.signalled.empty() ? " (already gone: rank 0 did not answer)"
                                            : " (by signal: rank 0 did not answer)";
    ctx.note("stopped rank{} {} of the store at {}{}\n", r.stopped.size() == 1 ? "" : "s",
             rank_list(r.stopped), dir, how);
  }
  if (!r.gone.empty()) {
    ctx.note("rank{} {} of the store at {}: lost earlier, gone (nothing of {} runs)\n",
             r.gone.size() == 1 ? "" : "s", rank_list(r.gone), dir,
             r.gone.size() == 1 ? "it" : "them");
  }
  std::vector<int> missing;
  for (const auto& u : r.unreachable) {
    const auto heard =
        u.last_heard >= 0 ? fmt::format(" (last heard {:.0f} s ago)", u.last_heard) : "";
    fmt::print(
        "rank {} on {}: not reachable{}; it ends itself within peer_timeout; if it was killed, run "
        "`ddstage clean` on {}\n",
        u.rank, u.host, heard, u.host);
    missing.push_back(u.rank);
  }
  if (!missing.empty()) {
    throw Error(ErrorKind::runtime,
                fmt::format("rank{} {} of the store at {} could not be stopped from here",
                            missing.size() == 1 ? "" : "s", rank_list(missing), dir));
  }
}

void run_stop(const StopOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
  report_stop(store_control(dir, settings).stop(), dir, ctx);
}

}  // namespace

void setup_stop(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StopOptions>();
  auto* sub = app.add_subcommand("stop", "Shut a store down: every rank frees its memory");
  add_store_option(*sub, opts->store);
  sub->callback([opts, &ctx] { run_stop(*opts, ctx); });
}

}  // namespace ddstage::cli
