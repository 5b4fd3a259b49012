#include "commands/load_cmd.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/store_control.hpp"
#include "support/json_writer.hpp"
#include "support/progress_line.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

struct LoadOptions {
  std::string store;
  std::string index;
  std::string name;
  std::string mem_limit;
  bool verify = false;
  bool replace = false;
  bool allow_stale = false;
  unsigned streams = 0;  ///< 0: the server's default
  bool json = false;
  std::string replicas = "1";
  bool repair = false;
  bool lazy = false;
  bool prefetch = false;
};

/// --replicas: a count of copies, or "node" for one per host.
int parse_replicas(const std::string& text) {
  if (text == "node") return replicas_per_node;
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw UsageError("--replicas takes a number of copies (1 or more) or 'node', not '" + text +
                     "'");
  return n;
}

void print_result_json(const LoadResult& r, const std::string& index) {
  const double rate = static_cast<double>(r.bytes) / std::max(r.seconds, 1e-9);
  JsonWriter j;
  j.begin_object()
      .field("name", r.name)
      .field("index", index)
      .field("samples", r.samples)
      .field("bytes", r.bytes)
      .field("seconds", r.seconds)
      .field("bytes_per_second", rate)
      .field("verified", r.verified);
  if (!r.warning.empty()) j.field("warning", r.warning);
  j.end_object();
  fmt::print("{}\n", j.str());
}

/// The store's progress as ProgressLine draws it: samples estimated from the bytes done.
ProgressUpdate load_update(const LoadProgress& p, double seconds) {
  const double fraction =
      p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 0;
  return {static_cast<uint64_t>(fraction * static_cast<double>(p.samples_total)), p.samples_total,
          p.bytes_done, seconds, false};
}

void run_load(const LoadOptions& opts, const CliContext& ctx) {
  if (opts.repair && (!opts.index.empty() || opts.replace || opts.replicas != "1"))
    throw UsageError(
        "load --repair takes no dataset, --replace or --replicas: it restores what "
        "the store loaded (--name picks one dataset)");
  if (!opts.repair && opts.index.empty())
    throw UsageError("load needs a dataset (DATASET.ddx), or --repair");
  if (opts.prefetch && !opts.lazy) throw UsageError("--prefetch fills a --lazy load: add --lazy");
  const auto settings = ctx.resolve_settings();
  auto control = store_control(store_dir(opts.store, settings), settings);
  LoadRequest request{opts.index,       opts.name,
                      opts.verify,      opts.replace,
                      opts.allow_stale, parse_mem_limit(opts.mem_limit),
                      opts.streams,     opts.repair ? 1 : parse_replicas(opts.replicas)};
  // A repair fills its new regions whole or lazily as asked, whatever the load did.
  request.lazy = opts.lazy;
  request.prefetch = opts.prefetch;
  const ProgressLine line("load", settings);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (line.enabled())
    request.progress = [&](const LoadProgress& p) { line(load_update(p, elapsed())); };
  std::vector<LoadResult> results;
  try {
    if (opts.repair) {
      results = control.repair(request);
    } else {
      results.push_back(control.load(request));
    }
  } catch (...) {
    if (line.enabled())
      fmt::print(stderr, "\n");  // the error line must not overwrite the progress line
    throw;
  }
  for (const auto& r : results) {
    if (line.enabled()) line({r.samples, r.samples, r.bytes, elapsed(), true});
    // Before the result: a script reading stdout gets the result alone.
    if (!r.warning.empty()) fmt::print(stderr, "ddstage: warning: {}\n", r.warning);
    if (opts.json) {
      print_result_json(r, opts.index);
      continue;
    }
    const double rate = static_cast<double>(r.bytes) / std::max(r.seconds, 1e-9);
    if (opts.lazy) {
      ctx.note("{} '{}': {} samples, {}, staged on first touch{}\n",
               opts.repair ? "repaired" : "loaded", r.name, r.samples,
               human_bytes(static_cast<double>(r.bytes)),
               opts.prefetch ? " and filled in the background" : "");
      continue;
    }
    ctx.note("{} '{}': {} samples, {} in {:.2f} s ({}/s){}\n", opts.repair ? "repaired" : "loaded",
             r.name, r.samples, human_bytes(static_cast<double>(r.bytes)), r.seconds,
             human_bytes(rate), r.verified ? ", checksums verified" : "");
  }
  if (opts.repair && results.empty()) ctx.note("nothing to repair\n");
}

}  // namespace

void setup_load(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<LoadOptions>();
  auto* sub = app.add_subcommand(
      "load", "Load a flattened dataset into a running store: each rank reads its shard");
  add_store_option(*sub, opts->store);
  sub->add_option("dataset", opts->index,
                  "The index directory (DATASET.ddx), readable by every server rank (not with "
                  "--repair)");
  sub->add_option("--name", opts->name, "Name in the store (default: the dataset's name)");
  sub->add_option("--replicas", opts->replicas,
                  "Copies of every sample, on ranks of different hosts when there are enough "
                  "(default 1), or 'node' for a full copy on every host");
  sub->add_flag("--repair", opts->repair,
                "Instead of loading a dataset: bring every dataset short of copies (or --name) "
                "back to its copies, read from origin onto live ranks");
  sub->add_flag("--lazy", opts->lazy,
                "Return at once: each sample is read from origin by its rank the first time a "
                "reader asks for it, and kept there for later reads");
  sub->add_flag("--prefetch", opts->prefetch,
                "With --lazy: each rank also fills the rest of its regions in the background");
  sub->add_flag("--verify", opts->verify,
                "Check every sample's checksum while loading (with --lazy: as it is staged)");
  sub->add_flag("--replace", opts->replace,
                "Replace a loaded dataset of the same name (once the new one is loaded)");
  sub->add_flag("--allow-stale", opts->allow_stale, "Load sources that changed after flattening");
  sub->add_option("--mem-limit", opts->mem_limit,
                  "Bytes each rank may hold for this load, e.g. 8G or 8GiB (binary either way; "
                  "default: the server's)");
  sub->add_flag("--json", opts->json,
                "Print what was done as one JSON object (samples, bytes, seconds, rate, "
                "verified) instead of the result line");
  sub->add_option(
         "--streams", opts->streams,
         "Reader threads per rank, each with large reads in flight (default: the server's)")
      ->check(CLI::Range(1u, max_load_streams));
  sub->callback([opts, &ctx] { run_load(*opts, ctx); });
}

}  // namespace ddstage::cli
