#include "commands/status_cmd.hpp"

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/store_control.hpp"
#include "support/json_writer.hpp"
#include "support/progress_line.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

struct StatusOptions {
  std::string store;
  bool json = false;
};

void print_status_json(const StoreStatus& s) {
  JsonWriter j;
  j.begin_object()
      .field("control", s.control)
      .field("started", s.started)
      .field("healthy", s.error.empty());
  if (!s.error.empty()) j.field("error", s.error);
  if (!s.busy.empty()) j.field("busy", s.busy);
  j.key("ranks").begin_array();
  for (const auto& r : s.ranks) {
    j.begin_object().field("rank", r.info.rank).field("host", r.info.host).field("pid", r.info.pid);
    j.field("state", std::string(state_name(r.state)))
        .field("lost", r.info.lost)
        .field("memory_used", r.memory_used)
        .field("memory_limit", r.info.memory_limit);
    if (r.last_heard >= 0) j.field("last_heard", r.last_heard);
    j.key("transports").begin_array();
    for (const auto& t : r.info.transports) j.value(t);
    j.end_array().key("tiers").begin_array();
    for (const auto& t : r.info.tiers) j.value(t);
    j.end_array().key("bytes_by_tier").begin_object();
    for (const auto& [tier, bytes] : r.bytes_by_tier) j.field(tier, bytes);
    j.end_object().end_object();
  }
  j.end_array().key("datasets").begin_array();
  for (const auto& d : s.datasets) {
    j.begin_object()
        .field("name", d.name)
        .field("index", d.index.string())
        .field("samples", d.samples)
        .field("state", d.state)
        .field("replicas", d.replicas)
        .field("samples_short", d.samples_short)
        .field("samples_lost", d.samples_lost)
        .field("lazy", d.lazy)
        .field("staged", d.staged)
        .field("origin_reads", d.origin_reads);
    // Which samples, as [first, last) pairs: a dataset of millions stays a few ranges.
    for (const auto& [key, ranges] :
         {std::pair{"short_ranges", &d.short_ranges}, std::pair{"lost_ranges", &d.lost_ranges}}) {
      j.key(key).begin_array();
      for (const auto& r : *ranges) j.begin_array().value(r.first).value(r.last).end_array();
      j.end_array();
    }
    j.key("lost_ranks").begin_array();
    for (int r : d.lost_ranks) j.value(r);
    j.end_array().key("samples_per_rank").begin_array();
    for (auto n : d.samples_per_rank) j.value(n);
    j.end_array().key("bytes_per_rank").begin_array();
    for (auto n : d.bytes_per_rank) j.value(n);
    j.end_array().end_object();
  }
  j.end_array().end_object();
  fmt::print("{}\n", j.str());
}

/// Ranges as `ddstage read --ids` takes them ("0-99,250-299"), the first 8 and a count after.
std::string id_ranges(const std::vector<ShardRange>& ranges) {
  std::string out;
  for (std::size_t i = 0; i < ranges.size() && i < 8; ++i) {
    const auto& r = ranges[i];
    out += (i ? "," : "") + (r.count() == 1 ? fmt::format("{}", r.first)
                                            : fmt::format("{}-{}", r.first, r.last - 1));
  }
  if (ranges.size() > 8) out += fmt::format(" and {} more ranges", ranges.size() - 8);
  return out;
}

void print_status_text(const StoreStatus& s) {
  fmt::print(
      "store     control {} since {}{}{}\n", s.control, s.started,
      s.error.empty() ? "" : (s.answered ? "  (UNHEALTHY: " : "  (NOT ANSWERING: ") + s.error + ")",
      s.busy.empty() ? "" : "  (busy: " + s.busy + "; memory as of before it)");
  fmt::print("ranks\n  {:<5} {:<20} {:<8} {:<13} {:<12} {:<12} {}\n", "rank", "host", "pid",
             "state", "memory used", "limit", "transports");
  for (const auto& r : s.ranks) {
    fmt::print("  {:<5} {:<20} {:<8} {:<13} {:<12} {:<12} {}\n", r.info.rank, r.info.host,
               r.info.pid, state_name(r.state), human_bytes(static_cast<double>(r.memory_used)),
               human_bytes(static_cast<double>(r.info.memory_limit)),
               fmt::join(r.info.transports, ","));
  }
  fmt::print("datasets\n");
  if (s.datasets.empty()) fmt::print("  (none loaded)\n");
  for (const auto& d : s.datasets) {
    std::vector<std::string> bytes;
    for (auto n : d.bytes_per_rank) bytes.push_back(human_bytes(static_cast<double>(n)));
    const auto copies = d.replicas == replicas_per_node ? std::string("one per node")
                                                        : fmt::format("{}", d.replicas);
    fmt::print("  {}: {} samples from {}, {} (copies: {})\n", d.name, d.samples, d.index.string(),
               d.state, copies);
    if (d.state != "healthy") {
      fmt::print(
          "    lost ranks: {}; {} sample(s) short of copies ({}), {} without any{} (`ddstage load "
          "--repair` restores them from origin)\n",
          fmt::join(d.lost_ranks, " "), d.samples_short, id_ranges(d.short_ranges), d.samples_lost,
          d.lost_ranges.empty() ? "" : " (" + id_ranges(d.lost_ranges) + ")");
    }
    if (d.lazy) {
      fmt::print("    lazy: {} sample(s) staged over its copies, {} read from origin\n", d.staged,
                 d.origin_reads);
    }
    fmt::print("    samples per rank: {}\n    bytes per rank:   {}\n",
               fmt::join(d.samples_per_rank, " "), fmt::join(bytes, "  "));
  }
}

void run_status(const StatusOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
  auto status = store_control(dir, settings).status();
  opts.json ? print_status_json(status) : print_status_text(status);
  if (!status.error.empty()) {
    throw Error(ErrorKind::runtime,
                "the store at " + dir +
                    (status.answered ? " is not healthy: " : " is not answering: ") + status.error);
  }
}

}  // namespace

void setup_status(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<StatusOptions>();
  auto* sub = app.add_subcommand("status", "Show a running store's ranks, datasets and memory");
  add_store_option(*sub, opts->store);
  sub->add_flag("--json", opts->json, "Print JSON (sizes as integer bytes)");
  sub->callback([opts, &ctx] { run_status(*opts, ctx); });
}

}  // namespace ddstage::cli
