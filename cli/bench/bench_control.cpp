#include "bench/bench_control.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "bench/bench_clock.hpp"
#include "bench/bench_report.hpp"
#include "cluster/control_scenario.hpp"
#include "cluster/message_costs.hpp"
#include "ddstage/error.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/store_control.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;
using detail::ClusterTimings;
using detail::ControlScenario;
using detail::SimReport;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

struct BenchControlOptions {
  int simulate = 0;
  int per_node = 4;
  uint64_t seed = 1;
  std::string store;
  BenchOutputs outputs;
};

double p99(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1];
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

/// One scenario, one protocol: its figures as a cell.
BenchCell cell(const std::string& protocol, const std::string& scenario, const SimReport& r,
               const ControlScenario& s) {
  BenchCell c{.dims = {{"protocol", protocol}, {"scenario", scenario}},
              .rows = static_cast<uint64_t>(r.ranks),
              .seconds = std::chrono::duration<double>(s.end).count()};
  auto& x = c.extras;
  if (!r.command_s.empty()) {
    // The median is the round trip; the slowest is one that met a stopped node and waited.
    auto sorted = r.command_s;
    std::sort(sorted.begin(), sorted.end());
    x.emplace_back("command_ms", sorted[sorted.size() / 2] * 1e3);
    x.emplace_back("command_max_ms", sorted.back() * 1e3);
  }
  if (!r.detect_rank_s.empty()) x.emplace_back("detect_process_s", max_of(r.detect_rank_s));
  if (!r.detect_node_s.empty()) x.emplace_back("detect_node_p99_s", p99(r.detect_node_s));
  // Nodes (the flat model: ranks) declared dead that did not crash: a lost partition side is
  // not in these scenarios.
  const auto crashed = s.crashed();
  const auto false_deaths =
      std::count_if(r.declared_dead.begin(), r.declared_dead.end(), [&](int n) {
        const int node = protocol == "flat" ? n / s.per_node : n;
        return std::find(crashed.begin(), crashed.end(), node) == crashed.end();
      });
  x.emplace_back("false_deaths", static_cast<double>(false_deaths));
  x.emplace_back("coordinator_msgs_per_s", r.coordinator_inbound_per_s);
  x.emplace_back("descriptor_updates", static_cast<double>(r.views));
  if (!r.detect_node_s.empty()) x.emplace_back("verdict_spread_s", r.verdict_spread_s);
  return c;
}

/// Today's store.yaml for `ranks` ranks and one dataset held twice: its size and the time to
/// parse it (a Client parses it twice to attach).
std::pair<double, double> todays_descriptor(int ranks) {
  StoreDescriptor d;
  d.token = random_token();
  d.id = "0123456789abcdef";
  d.control = "node0000.cluster.example:40000";
  d.started = "2026-12-07T00:00:00Z";
  StoreDataset ds{.name = "train", .index = "/lustre/project/train.ddx", .replicas = 2};
  for (int r = 0; r < ranks; ++r) {
    d.ranks.push_back({.rank = r,
                       .host = fmt::format("node{:04}.cluster.example", r / 4),
                       .pid = 100000 + r,
                       .transports = {"local", "shm", "fabric"},
                       .memory_limit = 200ULL << 30,
                       .fabric_provider = "tcp;ofi_rxm",
                       .fabric_address = std::string(32, 'a'),
                       .control = fmt::format("node{:04}.cluster.example:{}", r / 4, 40001 + r % 4),
                       .tiers = {"memory"}});
    for (int copy = 0; copy < 2; ++copy)
      ds.regions.push_back(
          {.rank = (r + copy * 4) % ranks,
           .first = static_cast<uint64_t>(r) * 1000,
           .last = static_cast<uint64_t>(r + 1) * 1000,
           .segment = fmt::format("/ddstage-0123456789abcdef-train-g{}-r{}", copy, r),
           .bytes = 1ULL << 30,
           .fabric = true,
           .fabric_key = 0x1234 + static_cast<uint64_t>(r),
           .fabric_base = 0x7f0000000000});
  }
  d.datasets.push_back(std::move(ds));
  const auto dir = fs::temp_directory_path() / fmt::format("ddstage-bench-control-{}", ::getpid());
  StoreDescriptor::prepare_directory(dir);
  d.write(dir);
  const double bytes = static_cast<double>(fs::file_size(StoreDescriptor::path_in(dir)));
  const auto t0 = Clock::now();
  (void)StoreDescriptor::read(dir);
  const double parse_ms = seconds_since(t0) * 1e3;
  fs::remove_all(dir);
  return {bytes, parse_ms};
}

void simulate(const BenchControlOptions& o, BenchReport& report) {
  const auto costs = detail::measure_message_costs();
  report.describe("ranks", fmt::format("{} simulated, {} a node ({} nodes)", o.simulate, o.per_node,
                                       (o.simulate + o.per_node - 1) / o.per_node));
  report.describe("costs (measured here)",
                  fmt::format("a message on an open local socket {:.1f} µs; a new control "
                              "connection and request (today's heartbeat) {:.1f} µs",
                              std::chrono::duration<double, std::micro>(costs.message).count(),
                              std::chrono::duration<double, std::micro>(costs.connect).count()));
  report.describe("seed", std::to_string(o.seed));
  const ClusterTimings timings;
  const detail::FlatSettings flat;
  const auto base = [&] {
    ControlScenario s;
    s.ranks = o.simulate;
    s.per_node = o.per_node;
    s.seed = s.fault_seed = o.seed;
    return s;
  };
  const int nodes = base().nodes();

  auto status = base();
  status.commands = 3;
  status.end = seconds(8);
  auto exits = base();
  exits.kill_ranks = std::min(4, nodes - 1);
  exits.end = seconds(8);
  auto death = base();
  death.crash_nodes = 1;
  death.end = seconds(12);
  auto many = base();
  many.crash_nodes = std::min(64, nodes / 4);
  many.end = seconds(15);
  auto busy = base();
  busy.slowdown = 5;
  busy.cpu_wait = milliseconds(100);
  busy.loss = 0.01;
  busy.pause_nodes = std::max(1, nodes / 100);
  busy.commands = 5;
  busy.end = seconds(20);
  const std::vector<std::pair<std::string, ControlScenario>> scenarios = {
      {"status x3", status},
      {fmt::format("{} processes end", exits.kill_ranks), exits},
      {"node 1 dies (a tree leader)", death},
      {fmt::format("{} nodes die at once", many.crash_nodes), many},
      {fmt::format("starved (CPU share 1/5), 1% loss, {} nodes stopped 2 s", busy.pause_nodes),
       busy}};
  for (const auto& [name, s] : scenarios) {
    fmt::print(stderr, "bench control: {} ...\n", name);
    report.add(cell("tree", name, detail::simulate_tree(s, timings, costs), s));
    auto flat_s = s;
    // Today's protocol marks one rank a check (1.5 s) after a 30 s silence: give it the time.
    if (s.crash_nodes > 0)
      flat_s.end =
          s.crash_at + flat.peer_timeout + seconds(2 * s.crash_nodes * s.per_node) + seconds(5);
    report.add(cell("flat", name, detail::simulate_flat(flat_s, flat, costs), flat_s));
  }
  const auto [bytes, parse_ms] = todays_descriptor(o.simulate);
  BenchCell d{.dims = {{"protocol", "flat"}, {"scenario", "attach (today's store.yaml)"}},
              .rows = static_cast<uint64_t>(o.simulate)};
  d.extras = {{"descriptor_bytes", bytes}, {"attach_ms", 2 * parse_ms}};
  report.add(std::move(d));
  report.note(fmt::format(
      "attach_ms: two parses of a real store.yaml of {} ranks and one dataset held twice (a "
      "Client parses it twice); the compact descriptor is not built yet, so the tree has no "
      "attach figure",
      o.simulate));
  report.note(
      "tree: the production NodeLeaderCore/CoordinatorCore on every simulated node; "
      "flat: a model of today's heartbeat, PeerWatch and command fan-out");
}

void measure_store(const BenchControlOptions& o, BenchReport& report) {
  const fs::path dir = o.store;
  const double bytes = static_cast<double>(fs::file_size(StoreDescriptor::path_in(dir)));
  auto t0 = Clock::now();
  const auto descriptor = StoreDescriptor::read(dir);
  const double parse_ms = seconds_since(t0) * 1e3;
  StoreControl control(dir);
  t0 = Clock::now();
  const auto status = control.status();
  const double command_ms = seconds_since(t0) * 1e3;
  report.describe("store", fmt::format("{} ({} ranks)", dir.string(), descriptor.ranks.size()));
  BenchCell c{.dims = {{"protocol", "flat"}, {"scenario", "the store in hand"}},
              .rows = descriptor.ranks.size()};
  c.extras = {{"descriptor_bytes", bytes}, {"attach_ms", 2 * parse_ms}, {"command_ms", command_ms}};
  report.add(std::move(c));
  report.note(
      "detection figures need a rank to die: measure them with --simulate, or with "
      "`ddstage bench failover` on a store that may lose a rank");
  (void)status;
}

void run_bench_control(const BenchControlOptions& o) {
  o.outputs.check();
  if ((o.simulate > 0) == !o.store.empty())
    throw UsageError("bench control: give --simulate N or --store DIR (one of them)");
  if (o.simulate > 0 && o.simulate < 2 * o.per_node)
    throw UsageError(fmt::format("bench control: --simulate {} is under two nodes of {} ranks",
                                 o.simulate, o.per_node));
  BenchReport report("control", "rank");
  report.set_plot_x("scenario");
  report.set_panels({{"detection, s",
                      {{"detect_process_s", "process"}, {"detect_node_p99_s", "node p99"}},
                      1,
                      false},
                     {"false deaths", {{"false_deaths", "false deaths"}}, 1, false}});
  if (o.simulate > 0)
    simulate(o, report);
  else
    measure_store(o, report);
  report.print();
  report.write(o.outputs);
}

}  // namespace

void setup_bench_control(CLI::App& bench, CliContext&) {
  auto opts = std::make_shared<BenchControlOptions>();
  auto* sub = bench.add_subcommand(
      "control",
      "The control plane at scale: detection, false deaths, command and attach time, "
      "simulated at N ranks (leader tree vs today's flat protocol) or on a store");
  sub->add_option("--simulate", opts->simulate, "Ranks to simulate (4 a node by default)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--per-node", opts->per_node, "Ranks a node in the simulation")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", opts->seed, "Seed of the simulation (message order and faults)")
      ->capture_default_str();
  sub->add_option("--store", opts->store, "Measure the running store in DIR instead");
  add_bench_output_options(*sub, opts->outputs);
  sub->callback([opts] { run_bench_control(*opts); });
}

}  // namespace ddstage::cli
