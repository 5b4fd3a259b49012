#include "commands/store_cmds.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/shard_loader.hpp"
#include "ddstage/store_control.hpp"
#include "support/json_writer.hpp"
#include "support/progress_line.hpp"
#if DDSTAGE_HAVE_MPI
#include "ddstage/store_server.hpp"
#endif

namespace ddstage::cli {
namespace {

struct StoreOptions {
  std::string store;
  std::string listen;
  std::string mem_limit;
  std::string index;
  std::string name;
  bool verify = false;
  bool replace = false;
  bool allow_stale = false;
  bool json = false;
  unsigned streams = 0;  ///< 0: the server's default
};

uint64_t parse_mem_limit(const std::string& text) {
  if (text.empty()) return 0;
  auto v = parse_size(text);
  if (!v || *v == 0) throw UsageError("bad --mem-limit '" + text + "' (a size like 8G)");
  return *v;
}

void run_serve(const StoreOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
#if DDSTAGE_HAVE_MPI
  const auto transport = settings.get_string("transport");
  run_store_server({dir, opts.listen, transport, parse_mem_limit(opts.mem_limit), std::move(settings)}, ctx.argc,
                   ctx.argv);
#else
  throw UsageError("this ddstage was built without MPI (DDSTAGE_WITH_MPI=OFF): it cannot serve a store");
#endif
}

/// The store's progress as ProgressLine draws it: samples estimated from the bytes done.
ProgressUpdate load_update(const LoadProgress& p, double seconds) {
  const double fraction = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 0;
  return {static_cast<uint64_t>(fraction * static_cast<double>(p.samples_total)), p.samples_total, p.bytes_done,
          seconds, false};
}

void run_load(const StoreOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  auto control = store_control(store_dir(opts.store, settings), settings);
  LoadRequest request{opts.index, opts.name, opts.verify, opts.replace, opts.allow_stale,
                      parse_mem_limit(opts.mem_limit), opts.streams};
  const ProgressLine line("load", settings);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (line.enabled()) request.progress = [&](const LoadProgress& p) { line(load_update(p, elapsed())); };
  LoadResult r;
  try {
    r = control.load(request);
  } catch (...) {
    if (line.enabled()) fmt::print(stderr, "\n");  // the error line must not overwrite the progress line
    throw;
  }
  if (line.enabled()) line({r.samples, r.samples, r.bytes, elapsed(), true});
  fmt::print("loaded '{}': {} samples, {} in {:.2f} s ({}/s){}\n", r.name, r.samples,
             human_bytes(static_cast<double>(r.bytes)), r.seconds,
             human_bytes(static_cast<double>(r.bytes) / std::max(r.seconds, 1e-9)),
             r.verified ? ", checksums verified" : "");
}

void print_status_json(const StoreStatus& s) {
  JsonWriter j;
  j.begin_object().field("control", s.control).field("started", s.started).field("healthy", s.error.empty());
  if (!s.error.empty()) j.field("error", s.error);
  if (!s.busy.empty()) j.field("busy", s.busy);
  j.key("ranks").begin_array();
  for (const auto& r : s.ranks) {
    j.begin_object().field("rank", r.info.rank).field("host", r.info.host).field("pid", r.info.pid);
    j.field("state", std::string(state_name(r.state))).field("memory_used", r.memory_used).field("memory_limit", r.info.memory_limit);
    if (r.last_heard >= 0) j.field("last_heard", r.last_heard);
    j.key("transports").begin_array();
    for (const auto& t : r.info.transports) j.value(t);
    j.end_array().end_object();
  }
  j.end_array().key("datasets").begin_array();
  for (const auto& d : s.datasets) {
    j.begin_object().field("name", d.name).field("index", d.index.string()).field("samples", d.samples);
    j.key("samples_per_rank").begin_array();
    for (auto n : d.samples_per_rank) j.value(n);
    j.end_array().key("bytes_per_rank").begin_array();
    for (auto n : d.bytes_per_rank) j.value(n);
    j.end_array().end_object();
  }
  j.end_array().end_object();
  fmt::print("{}\n", j.str());
}

void print_status_text(const StoreStatus& s) {
  fmt::print("store     control {} since {}{}{}\n", s.control, s.started,
             s.error.empty() ? "" : (s.answered ? "  (UNHEALTHY: " : "  (NOT ANSWERING: ") + s.error + ")",
             s.busy.empty() ? "" : "  (busy: " + s.busy + "; memory as of before it)");
  fmt::print("ranks\n  {:<5} {:<20} {:<8} {:<13} {:<12} {:<12} {}\n", "rank", "host", "pid", "state", "memory used",
             "limit", "transports");
  for (const auto& r : s.ranks) {
    fmt::print("  {:<5} {:<20} {:<8} {:<13} {:<12} {:<12} {}\n", r.info.rank, r.info.host, r.info.pid,
               state_name(r.state), human_bytes(static_cast<double>(r.memory_used)),
               human_bytes(static_cast<double>(r.info.memory_limit)), fmt::join(r.info.transports, ","));
  }
  fmt::print("datasets\n");
  if (s.datasets.empty()) fmt::print("  (none loaded)\n");
  for (const auto& d : s.datasets) {
    fmt::print("  {}: {} samples from {}\n    samples per rank: {}\n    bytes per rank:   {}\n", d.name, d.samples,
               d.index.string(), fmt::join(d.samples_per_rank, " "), fmt::join(d.bytes_per_rank, " "));
  }
}

void run_status(const StoreOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
  auto status = store_control(dir, settings).status();
  opts.json ? print_status_json(status) : print_status_text(status);
  if (!status.error.empty()) {
    throw Error(ErrorKind::runtime,
                "the store at " + dir + (status.answered ? " has lost a rank: " : " is not answering: ") + status.error);
  }
}

/// What stop did, one line per fact; the error (exit 1) when some rank may still run.
void report_stop(const StopResult& r, const std::string& dir) {
  for (const auto& file : r.cleaned.removed) fmt::print("removed {}\n", file.path.string());
  if (r.descriptor_removed) fmt::print("removed {}\n", StoreDescriptor::path_in(dir).string());
  if (!r.stopped.empty()) {
    // Rank 0 silent: say whether stop ended ranks or found them already gone (killed, crashed).
    const char* how = r.no_answer.empty() ? "" : r.signalled.empty() ? " (already gone: rank 0 did not answer)"
                                                                      : " (by signal: rank 0 did not answer)";
    fmt::print("stopped rank{} {} of the store at {}{}\n", r.stopped.size() == 1 ? "" : "s", rank_list(r.stopped), dir,
               how);
  }
  std::vector<int> missing;
  for (const auto& u : r.unreachable) {
    const auto heard = u.last_heard >= 0 ? fmt::format(" (last heard {:.0f} s ago)", u.last_heard) : "";
    fmt::print("rank {} on {}: not reachable{}; it ends itself within peer_timeout; if it was killed, run "
               "`ddstage clean` on {}\n", u.rank, u.host, heard, u.host);
    missing.push_back(u.rank);
  }
  if (!missing.empty()) {
    throw Error(ErrorKind::runtime, fmt::format("rank{} {} of the store at {} could not be stopped from here",
                                                missing.size() == 1 ? "" : "s", rank_list(missing), dir));
  }
}

void run_stop(const StoreOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
  report_stop(store_control(dir, settings).stop(), dir);
}

CLI::App* store_subcommand(CLI::App& app, const char* name, const char* help, StoreOptions& opts) {
  auto* sub = app.add_subcommand(name, help);
  sub->add_option("--store", opts.store, "The store directory (holds store.yaml); default: the setting store (DDSTAGE_STORE)");
  return sub;
}

}  // namespace

std::string store_dir(const std::string& flag, const Settings& settings) {
  if (!flag.empty()) return flag;
  const auto& dir = settings.get_string("store");
  if (dir.empty()) throw UsageError("no store: pass --store DIR or set DDSTAGE_STORE");
  return dir;
}

std::string store_for_dataset(const std::string& flag, const std::string& dataset, const CliContext& ctx) {
  if (!flag.empty() || dataset.empty()) return flag;
  return ctx.resolve_settings().get_string("store");
}

StoreControl store_control(const std::string& dir, const Settings& settings) {
  return StoreControl(dir, settings.get_duration("control_timeout"), settings.get_duration("peer_timeout"));
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

void setup_serve(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StoreOptions>();
  auto* sub = store_subcommand(app, "serve", "Run a store: one rank per MPI process (mpiexec/srun), until `stop`", *opts);
  sub->add_option("--listen", opts->listen, "Control socket HOST[:PORT] on rank 0 (default: this host's name, any port)");
  add_setting_option(*sub, ctx, "--transport", "transport",
                     "What the ranks offer besides shared memory: auto (libfabric when on several hosts), shm, or "
                     "fabric (setting transport)");
  sub->add_option("--mem-limit", opts->mem_limit, "Bytes each rank may hold (default: 80% of available memory / ranks on the node)");
  sub->callback([opts, &ctx] { run_serve(*opts, ctx); });
}

void setup_load(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StoreOptions>();
  auto* sub = store_subcommand(app, "load", "Load a flattened dataset into a running store: each rank reads its shard", *opts);
  sub->add_option("dataset", opts->index, "The index directory (DATASET.ddx), readable by every server rank")->required();
  sub->add_option("--name", opts->name, "Name in the store (default: the dataset's name)");
  sub->add_flag("--verify", opts->verify, "Check every sample's checksum while loading");
  sub->add_flag("--replace", opts->replace, "Replace a loaded dataset of the same name (once the new one is loaded)");
  sub->add_flag("--allow-stale", opts->allow_stale, "Load sources that changed after flattening");
  sub->add_option("--mem-limit", opts->mem_limit, "Bytes each rank may hold for this load (default: the server's)");
  sub->add_option("--streams", opts->streams, "Reader threads per rank, each with large reads in flight (default: the server's)")
      ->check(CLI::Range(1u, max_load_streams));
  sub->callback([opts, &ctx] { run_load(*opts, ctx); });
}

void setup_status(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StoreOptions>();
  auto* sub = store_subcommand(app, "status", "Show a running store's ranks, datasets and memory", *opts);
  sub->add_flag("--json", opts->json, "Print JSON");
  sub->callback([opts, &ctx] { run_status(*opts, ctx); });
}

void setup_stop(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StoreOptions>();
  auto* sub = store_subcommand(app, "stop", "Shut a store down: every rank frees its memory", *opts);
  sub->callback([opts, &ctx] { run_stop(*opts, ctx); });
}

}  // namespace ddstage::cli
