#include "bench/bench_failover.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_report.hpp"
#include "bench/training_loop.hpp"
#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/host_name.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFailoverOptions {
  std::string store;
  std::string dataset;
  std::string field;            ///< empty: the first
  std::string signal = "stop";  ///< stop (a hung rank) or kill (a dead one)
  int rank = -1;                ///< -1: the highest rank holding a region
  uint64_t batch = 64;
  uint64_t before = 30;  ///< batches before the signal
  uint64_t after = 30;   ///< batches from the signal on
  uint64_t seed = 1;
  BenchOutputs outputs;
};

/// The rank to signal: named, or the highest one holding a region of the dataset (not rank 0
/// by default: it also answers the store's control requests, a loss of another kind). Only a
/// rank on this host can be signalled.
const RankInfo& victim_of(const StoreDescriptor& d, const StoreDataset& dataset, int wanted) {
  int rank = wanted;
  if (rank < 0) {
    for (const auto& r : dataset.regions) rank = std::max(rank, r.rank);
  }
  if (rank < 0 || static_cast<std::size_t>(rank) >= d.ranks.size())
    throw UsageError(fmt::format("--rank {}: the store has ranks 0-{}", rank, d.ranks.size() - 1));
  const RankInfo& info = d.ranks[static_cast<std::size_t>(rank)];
  if (info.lost) throw UsageError(fmt::format("rank {} is lost already", rank));
  if (info.host != host_name() || info.pid <= 0) {
    throw UsageError(
        fmt::format("rank {} runs on {}: run the bench there to signal it", rank, info.host));
  }
  return info;
}

void send_signal(const RankInfo& rank, int sig) {
  if (::kill(static_cast<pid_t>(rank.pid), sig) != 0) {
    throw IoError(fmt::format("signal rank {} (pid {})", rank.rank, rank.pid), errno);
  }
}

/// One batch as the reader saw it.
struct BatchTime {
  double seconds = 0;
  uint64_t bytes = 0;
  uint64_t mismatches = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

BenchCell phase_cell(const std::string& signal, const std::string& phase,
                     std::span<const BatchTime> batches, uint64_t batch) {
  BenchCell c{.dims = {{"signal", signal}, {"phase", phase}}};
  uint64_t mismatches = 0;
  for (const auto& b : batches) {
    c.ns_per_row.record(static_cast<uint64_t>(b.seconds * 1e9));
    c.seconds += b.seconds;
    c.bytes += b.bytes;
    mismatches += b.mismatches;
  }
  c.rows = batches.size() * batch;
  c.extras = {{"mismatches", static_cast<double>(mismatches)}};
  return c;
}

void run_bench_failover(const BenchFailoverOptions& opts, const CliContext& ctx) {
  opts.outputs.check();
  const int sig = opts.signal == "kill" ? SIGKILL : SIGSTOP;
  const auto settings = ctx.resolve_settings();
  const auto descriptor = StoreDescriptor::read(opts.store);
  const auto& entry = descriptor.dataset(opts.dataset);
  if (entry.replicas == 1) {
    throw UsageError(fmt::format(
        "dataset {} is held once: a failover needs a second copy (ddstage load --replicas 2)",
        opts.dataset));
  }
  const RankInfo& victim = victim_of(descriptor, entry, opts.rank);
  const Client client(opts.store, settings);
  const Dataset dataset = client.open(opts.dataset);
  const Index& index = dataset.index();
  const uint32_t field = opts.field.empty() ? 0 : index.field_id(opts.field);
  const std::string name = index.fields()[field].name;
  const uint64_t steps = opts.before + opts.after;
  const auto ids = shuffled_batches(index.samples(), opts.batch, steps, opts.seed);
  OriginReader checker(index, {.allow_stale = true});
  Reader reader = dataset.reader();
  std::vector<BatchTime> times;
  std::vector<std::byte> out;
  std::optional<std::string> failed;
  for (uint64_t i = 0; i < steps && !failed; ++i) {
    const auto batch_ids = std::span(ids).subspan(i * opts.batch, opts.batch);
    if (i == opts.before) send_signal(victim, sig);
    const auto t0 = Clock::now();
    try {
      out.resize(reader.batch_bytes(name, batch_ids));
      reader.get_batch(name, batch_ids, out);
    } catch (const Error& e) {
      failed = fmt::format("batch {} (the signal came before batch {}) failed after {:.3f} s: {}",
                           i, opts.before, std::chrono::duration<double>(Clock::now() - t0).count(),
                           e.what());
      break;
    }
    BatchTime t{std::chrono::duration<double>(Clock::now() - t0).count(), out.size()};
    uint64_t at = 0;
    for (uint64_t id : batch_ids) {
      const uint64_t length = index.entry(id, field).length;
      t.mismatches += !checker.check_row(id, field, std::span(out).subspan(at, length));
      at += length;
    }
    times.push_back(t);
  }
  // A hung rank is let go again, to be stopped with its store; it may be marked lost by now.
  if (sig == SIGSTOP) send_signal(victim, SIGCONT);

  // A step is one batch: its latency is the whole get_batch.
  BenchReport report("failover", "step");
  report.set_panels({{"batch, µs", {{"mean_us", "mean"}, {"max_us", "max"}}}});
  report.describe("dataset", fmt::format("{} ({} samples, {} copies), field {}", opts.dataset,
                                         index.samples(), entry.replicas, name));
  report.describe(
      "reader",
      fmt::format("a step is a batch of {} random ids, transport {}, failover_timeout {}, "
                  "read_timeout {}",
                  opts.batch, settings.get_string("transport"),
                  settings.get_string("failover_timeout"), settings.get_string("read_timeout")));
  report.describe("loss", fmt::format("SIG{} to rank {} (pid {}) before batch {} of {}",
                                      sig == SIGKILL ? "KILL" : "STOP", victim.rank, victim.pid,
                                      opts.before, steps));
  const auto all = std::span(times);
  const auto normal = all.first(std::min<std::size_t>(opts.before, all.size()));
  const auto later = all.subspan(normal.size());
  report.add(phase_cell(opts.signal, "before", normal, opts.batch));
  if (!later.empty()) {
    report.add(phase_cell(opts.signal, "hit", later.first(1), opts.batch));
    report.add(phase_cell(opts.signal, "after", later.subspan(1), opts.batch));
    std::vector<double> before_s;
    std::vector<double> after_s;
    for (const auto& b : normal) before_s.push_back(b.seconds);
    for (const auto& b : later.subspan(1)) after_s.push_back(b.seconds);
    const double base = median(before_s);
    const double hit = later.front().seconds;
    const double worst = std::max_element(later.begin(), later.end(), [](auto& a, auto& b) {
                           return a.seconds < b.seconds;
                         })->seconds;
    const double read_timeout =
        std::chrono::duration<double>(settings.get_duration("read_timeout")).count();
    report.note(fmt::format(
        "normal batch {:.2f} ms (median of {}); the batch that hit the lost rank {:.2f} ms, "
        "{:.1f}x; slowest after the signal {:.2f} ms; after failover {:.2f} ms (median)",
        base * 1e3, normal.size(), hit * 1e3, base > 0 ? hit / base : 0.0, worst * 1e3,
        median(after_s) * 1e3));
    report.note(fmt::format("target: within read_timeout ({:.1f} s): {}", read_timeout,
                            worst <= read_timeout ? "met" : "missed"));
  }
  report.print();
  report.write(opts.outputs);
  if (failed) throw Error(ErrorKind::runtime, *failed);
  for (const auto& t : times) {
    if (t.mismatches)
      throw Error(ErrorKind::runtime, "rows returned bytes that do not match the index");
  }
}

}  // namespace

void setup_bench_failover(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchFailoverOptions>();
  auto* sub = bench.add_subcommand(
      "failover",
      "A reader's batches before and after a rank is hung or killed, with the dataset held "
      "twice (load --replicas)");
  sub->add_option("--store", opts->store,
                  "The store directory (default with --dataset: DDSTAGE_STORE)");
  sub->add_option("--dataset", opts->dataset, "A dataset loaded with --replicas 2 or more")
      ->required();
  sub->add_option("--field", opts->field, "The field to read (default: the first)");
  sub->add_option("--signal", opts->signal,
                  "stop: the rank hangs (SIGSTOP, SIGCONT after); kill: it dies (SIGKILL)")
      ->capture_default_str()
      ->check(CLI::IsMember({"stop", "kill"}));
  sub->add_option("--rank", opts->rank,
                  "The rank to signal, on this host (default: the highest holding the dataset)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--batch", opts->batch, "Samples per batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--before", opts->before, "Batches before the signal")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--after", opts->after, "Batches from the signal on")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seed", opts->seed, "Seed of the random ids")->capture_default_str();
  add_bench_output_options(*sub, opts->outputs);
  sub->callback([opts, &ctx] {
    opts->store = store_for_dataset(opts->store, opts->dataset, ctx);
    run_bench_failover(*opts, ctx);
  });
}

}  // namespace ddstage::cli
