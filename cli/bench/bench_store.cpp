#include "bench/bench_store.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/fabric_floor.hpp"
#include "ddstage/tool/gpu_info.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

/// A get_batch reader of a served dataset into a host buffer of its own. Cells run copies of
/// a reader (one per thread): they share its buffer, so what warm-up grew stays grown and no
/// timed call pays for growing it.
ReadFn client_read(std::shared_ptr<Reader> reader, std::string field) {
  auto dest = std::make_shared<std::vector<std::byte>>();
  return
      [reader = std::move(reader), field = std::move(field), dest](std::span<const uint64_t> ids) {
        const uint64_t bytes = reader->batch_bytes(field, ids);
        if (dest->size() < bytes) dest->resize(std::bit_ceil(bytes));
        reader->get_batch(field, ids, std::span(*dest).first(bytes));
        return bytes;
      };
}

/// The same into device memory: an allocation with its own stream per reader, shared by its
/// copies like client_read's buffer, grown to powers of two so that variable rows rarely
/// regrow it (a cudaFree inside a timed call would stall every thread's device work).
ReadFn device_read(std::shared_ptr<Reader> reader, std::string field, int device) {
  auto dest = std::make_shared<std::optional<DeviceAllocation>>();
  auto capacity = std::make_shared<uint64_t>(0);
  return [reader = std::move(reader), field = std::move(field), device, dest,
          capacity](std::span<const uint64_t> ids) {
    const uint64_t bytes = reader->batch_bytes(field, ids);
    if (*capacity < bytes) {
      dest->reset();
      dest->emplace(device, std::bit_ceil(bytes));
      *capacity = std::bit_ceil(bytes);
    }
    reader->get_batch(field, ids, (*dest)->buffer(bytes));
    return bytes;
  };
}

/// Settings with the way's transport ("fabric:tcp" is transport fabric, provider tcp) and,
/// for "gpu:PATH" destinations, gpu.path.
Settings way_settings(const CliContext& ctx, const std::string& way, const std::string& dest) {
  CliContext c = ctx;
  const auto colon = way.find(':');
  c.setting_flags["transport"] = way.substr(0, colon);
  if (colon != std::string::npos) c.setting_flags["fabric.provider"] = way.substr(colon + 1);
  if (dest.starts_with("gpu:")) c.setting_flags["gpu.path"] = dest.substr(4);
  return c.resolve_settings();
}

/// The destinations asked for, as StoreWay::dest values ("host", "gpu:direct", ...); {""} when
/// only host was asked (no dest column). Error "no GPU: ..." before anything is measured when
/// gpu is asked and no built runtime has the device.
std::vector<std::string> destinations(const BenchStoreOptions& opts, BenchReport& report) {
  bool gpu = false;
  for (const auto& d : opts.dests) {
    if (d != "host" && d != "gpu") throw UsageError("bad --dest '" + d + "' (host or gpu)");
    gpu = gpu || d == "gpu";
  }
  for (const auto& p : opts.gpu_paths) {
    if (p != "direct" && p != "staged")
      throw UsageError("bad --gpu-path '" + p + "' (direct or staged)");
  }
  if (!gpu) return {""};
  std::string reasons;
  for (const auto& runtime : gpu_info()) {
    if (runtime.devices > opts.gpu) {
      const auto at = static_cast<std::size_t>(opts.gpu);
      report.describe(
          "gpu",
          fmt::format("device {} of {}{}", opts.gpu, memory_kind_name(runtime.kind),
                      at < runtime.device_names.size() ? ": " + runtime.device_names[at] : ""));
      std::vector<std::string> out;
      for (const auto& d : opts.dests) {
        if (d == "host") out.emplace_back("host");
        if (d == "gpu") {
          for (const auto& p : opts.gpu_paths) out.push_back("gpu:" + p);
        }
      }
      return out;
    }
    reasons +=
        fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", memory_kind_name(runtime.kind),
                    runtime.devices > 0 ? fmt::format("no device {}", opts.gpu) : runtime.reason);
  }
  throw Error(ErrorKind::runtime,
              "no GPU: " + (reasons.empty() ? "ddstage was built without CUDA and HIP" : reasons));
}

/// With both GPU paths measured: the faster at the largest batch (one thread, own reader)
/// becomes this node's gpu.path=auto, which readers find in the cache file.
void cache_faster_gpu_path(BenchReport& report, const std::vector<uint64_t>& batches) {
  const uint64_t batch = *std::max_element(batches.begin(), batches.end());
  const auto mean_of = [&](const char* dest) {
    double sum = 0;
    for (const auto& c : report.cells()) {
      const auto* d = c.dim("dest");
      if (d && *d == BenchDim{std::string(dest)} && *c.dim("batch") == BenchDim{batch} &&
          *c.dim("threads") == BenchDim{uint64_t{1}} &&
          *c.dim("sharing") == BenchDim{std::string("own")}) {
        sum += c.ns_per_row.mean();
      }
    }
    return sum;
  };
  const double direct = mean_of("gpu:direct");
  const double staged = mean_of("gpu:staged");
  if (direct <= 0 || staged <= 0) return;
  const GpuPath faster = direct < staged ? GpuPath::direct : GpuPath::staged;
  try {
    cache_gpu_path(faster);
    report.note(fmt::format(
        "gpu.path=auto on this node is now {} (batch {}: direct {:.3f}, staged {:.3f} µs/row "
        "summed over the ways; cached in {})",
        gpu_path_name(faster), batch, direct / 1e3, staged / 1e3, gpu_path_cache_file().string()));
  } catch (const Error& e) {
    report.note(fmt::format("{} is faster here, but it could not be cached for gpu.path=auto: {}",
                            gpu_path_name(faster), e.what()));
  }
}

/// x_raw of a served fabric way: the raw fi_read floor against the store's own registration of
/// the dataset on its largest rank (that rank's server and progress thread, as get_batch finds
/// them), paired with get_batch of that rank's rows. Nothing when the region cannot hold a row.
void pair_with_served_floor(BenchReport& report, const BenchStoreOptions& opts,
                            const CliContext& ctx, const StoreWay& way, const FieldRows& rows) {
  const auto descriptor = StoreDescriptor::read(opts.store);
  const auto& d = descriptor.dataset(opts.dataset);
  const auto largest = std::max_element(
      d.regions.begin(), d.regions.end(),
      [](const StoreRegion& a, const StoreRegion& b) { return a.bytes < b.bytes; });
  if (largest == d.regions.end() || !largest->fabric || largest->bytes < rows.row_bytes) return;
  const auto& rank = descriptor.ranks.at(static_cast<std::size_t>(largest->rank));
  const FloorPairing pairing{fmt::format("rank {}", largest->rank),
                             ids_in({largest->first, largest->last}, rows.ids.size(), opts.seed)};
  if (pairing.ids.empty()) return;
  FabricFloorReader reader(
      way_settings(ctx, way.transport, ""),
      fabric_floor_address(rank.fabric_provider, rank.fabric_address, largest->fabric_key,
                           largest->fabric_base, largest->bytes));
  pair_with_floor(report, way, pairing, reader, rows.row_bytes, opts.batches, opts.seed);
}

void run_served(const BenchStoreOptions& opts, const CliContext& ctx) {
  auto ways = opts.transports;
  if (ways.empty()) ways.push_back(ctx.resolve_settings().get_string("transport"));
  // Each way's name is checked as the `transport` setting is (its choices are the registry's
  // names for a client, kept in step by a unit test), before anything is opened.
  for (const auto& w : ways) {
    const auto colon = w.find(':');
    if (colon != std::string::npos && w.substr(0, colon) != "fabric")
      throw UsageError("bad --transport '" + w + "': only fabric takes a :PROVIDER");
    way_settings(ctx, w, "");
  }
  BenchReport report("store");
  report.describe("mode", "served: a client of the store in " + opts.store);
  report.describe("dataset", opts.dataset);
  report.describe("transports", fmt::format("{}", fmt::join(ways, ",")));
  report.describe("seed", std::to_string(opts.seed));
  report.describe("figures", "this client's (one process)");

  const auto dests = destinations(opts, report);
  struct Way {
    std::string transport, dest;
    Dataset dataset;
  };
  // One client per transport and destination: each opens its own way to the ranks, and
  // gpu.path is a client setting.
  std::vector<Way> way_of;
  for (const auto& w : ways) {
    for (const auto& d : dests)
      way_of.push_back({w, d, Client(opts.store, way_settings(ctx, w, d)).open(opts.dataset)});
  }
  const auto& index = way_of.front().dataset.index();
  const uint32_t field = opts.field.empty() ? index.default_field() : index.field_id(opts.field);
  const auto name = index.fields()[field].name;
  const auto rows = pick_rows(index, field, opts, opts.seed);
  report.describe("field",
                  fmt::format("{} ({} samples, {} bytes per row{})", name, index.samples(),
                              rows.row_bytes, index.fields()[field].variable ? " on average" : ""));
  const unsigned max_threads = *std::max_element(opts.threads.begin(), opts.threads.end());
  std::vector<StoreWay> store_ways;
  for (const auto& w : way_of) {
    auto make = [&] {
      auto reader = std::make_shared<Reader>(w.dataset.reader());
      return w.dest.starts_with("gpu") ? device_read(std::move(reader), name, opts.gpu)
                                       : client_read(reader, name);
    };
    store_ways.push_back(
        {w.transport, "get_batch", warmed_readers(max_threads, make, rows.ids), false, w.dest});
  }
  MatrixRun run{rows.row_bytes, rows.ids, [] {},
                [&rows](unsigned) { return rows.floor->reader(); }};
  run.profile_overhead = true;
  measure_matrix(report, opts, run, store_ways);
  for (const auto& way : store_ways) {
    if (way.transport.starts_with("fabric") && !way.dest.starts_with("gpu"))
      pair_with_served_floor(report, opts, ctx, way, rows);
  }
  add_matrix_notes(report);
  cache_faster_gpu_path(report, opts.batches);
  report.print();
  report.write(opts.out);
}

/// The profile's figures on the cell: its table as the detail, each stage's in the JSON.
void add_profile(BenchCell& c, const ProfileReport& r) {
  c.detail = profile::format(r);
  auto figures = [](const LatencyHistogram& h) {
    return std::vector<std::pair<std::string, double>>{
        {"seconds", static_cast<double>(h.sum()) / 1e9},
        {"mean_us", h.mean() / 1e3},
        {"p50_us", static_cast<double>(h.percentile(0.5)) / 1e3},
        {"p99_us", static_cast<double>(h.percentile(0.99)) / 1e3},
        {"max_us", static_cast<double>(h.max()) / 1e3},
        {"batches", static_cast<double>(h.count())}};
  };
  c.profile.emplace_back("get_batch", figures(r.batch_ns));
  for (std::size_t s = 0; s < profile_stage_count; ++s) {
    if (r.stage_ns[s].count())
      c.profile.emplace_back(stage_name(static_cast<ProfileStage>(s)), figures(r.stage_ns[s]));
  }
}

/// The profile's cost: batch 128 of the first way with the profile off and on, interleaved in
/// rounds (off first, then on first) so that a drift of the machine falls on both alike. The
/// headline compares the fastest calls (exact in the histogram, and untouched by the preemptions
/// that move a mean more than the profile does on a shared node; percentiles' 1/16 buckets are
/// too coarse for a 2% claim). Leaves the profile on.
void measure_profile_overhead(BenchReport& report, const MatrixRun& run, const StoreWay& way) {
  constexpr uint64_t batch = 128;
  constexpr int rounds = 6;
  std::array<BenchCell, 2> cells;
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t on = (i + static_cast<std::size_t>(r)) % 2;
      profile::enable(on == 1);
      BenchCell c;
      run.before_cell();
      run_cell(c, run.ids, {batch, 1, false}, way.reader);
      cells[on].merge(c);
    }
  }
  profile::enable(true);
  for (std::size_t on = 0; on < 2; ++on) {
    cells[on].dims = {{"transport", way.transport},
                      {"mode", way.mode},
                      {"row_bytes", run.row_bytes},
                      {"batch", batch},
                      {"threads", uint64_t{1}},
                      {"sharing", std::string("own")},
                      {"profile", std::string(on ? "on" : "off")}};
  }
  const double fastest = static_cast<double>(cells[1].ns_per_row.min()) /
                         static_cast<double>(std::max<uint64_t>(cells[0].ns_per_row.min(), 1));
  const double mean = cells[1].ns_per_row.mean() / std::max(cells[0].ns_per_row.mean(), 1e-9);
  cells[1].extras.emplace_back("x_off_min", fastest);
  cells[1].extras.emplace_back("x_off_mean", mean);
  report.note(fmt::format(
      "profile overhead ({} {} B, batch {}, {} interleaved rounds each): on costs {:.3f}x off per "
      "row in the fastest call ({:.3f}x in the mean)",
      way.transport, run.row_bytes, batch, rounds, fastest, mean));
  for (auto& c : cells) report.add(std::move(c));
}

}  // namespace

FieldRows pick_rows(const Index& index, uint32_t field, const BenchStoreOptions& opts,
                    uint64_t seed) {
  uint64_t total = 0;
  for (uint64_t s = 0; s < index.samples(); ++s) total += index.entry(s, field).length;
  FieldRows rows{.row_bytes =
                     std::max<uint64_t>(1, total / std::max<uint64_t>(1, index.samples()))};
  std::mt19937_64 rng(seed);
  rows.ids.resize(cell_rows(opts, rows.row_bytes));
  for (auto& id : rows.ids)
    id = std::uniform_int_distribution<uint64_t>(0, index.samples() - 1)(rng);
  rows.floor = std::make_shared<const MemcpyFloor>(
      total, [&index, field](uint64_t id) { return index.entry(id, field).length; });
  return rows;
}

std::function<ReadFn(unsigned)> warmed_readers(unsigned count, const std::function<ReadFn()>& make,
                                               std::span<const uint64_t> ids) {
  std::vector<ReadFn> readers;
  for (unsigned t = 0; t < count; ++t) readers.push_back(make());
  warm_up(readers, ids);
  return [readers = std::move(readers)](unsigned t) { return readers[t]; };
}

uint64_t cell_rows(const BenchStoreOptions& opts, uint64_t row_bytes) {
  const auto cap = parse_size(opts.cell_bytes);
  if (!cap || *cap == 0)
    throw UsageError("bad --cell-bytes '" + opts.cell_bytes + "' (a size like 1G)");
  return std::max<uint64_t>(1, std::min(opts.samples, *cap / std::max<uint64_t>(1, row_bytes)));
}

void check_matrix_options(const BenchStoreOptions& opts) {
  if (std::find(opts.batches.begin(), opts.batches.end(), 0) != opts.batches.end()) {
    throw UsageError("--batch sizes must be > 0");
  }
  if (std::find(opts.threads.begin(), opts.threads.end(), 0u) != opts.threads.end()) {
    throw UsageError("--threads counts must be > 0");
  }
  for (const auto& s : opts.sharing) {
    if (s != "own" && s != "shared") throw UsageError("bad --sharing '" + s + "' (own or shared)");
  }
  if (opts.samples == 0) throw UsageError("--samples must be > 0");
  cell_rows(opts, 1);
  opts.out.check();
}

void measure_matrix(BenchReport& report, const BenchStoreOptions& opts, const MatrixRun& run,
                    const std::vector<StoreWay>& ways) {
  auto cell = [&](const std::string& transport, const std::string& mode, uint64_t batch,
                  unsigned threads, const std::string& sharing,
                  const std::function<ReadFn(unsigned)>& reader, const std::string& dest = {}) {
    BenchCell c{.dims = {{"transport", transport},
                         {"mode", mode},
                         {"row_bytes", run.row_bytes},
                         {"batch", batch},
                         {"threads", uint64_t{threads}},
                         {"sharing", sharing}}};
    if (!dest.empty()) c.dims.emplace_back("dest", dest);
    const bool profiled = opts.profile && mode != "floor";
    if (profiled) profile::reset();
    run.before_cell();
    run_cell(c, run.ids, {batch, threads, sharing == "shared"}, reader);
    if (profiled) add_profile(c, profile::snapshot());
    return c;
  };
  // Warmed like the ways' readers: its destination buffer is sized and touched before timing.
  const std::vector<ReadFn> floor_reader{run.floor(0)};
  warm_up(floor_reader, run.ids);
  for (uint64_t batch : opts.batches) {
    const auto& floor = report.add(
        cell("memcpy", "floor", batch, 1, "own", [&](unsigned) { return floor_reader[0]; }));
    const double floor_us = floor.ns_per_row.mean();
    for (const auto& way : ways) {
      for (unsigned threads : opts.threads) {
        if (way.single_thread && threads > 1) continue;
        for (const auto& sharing : opts.sharing) {
          auto c = cell(way.transport, way.mode, batch, threads, sharing, way.reader, way.dest);
          if (floor_us > 0) c.extras.emplace_back("x_floor", c.ns_per_row.mean() / floor_us);
          report.add(std::move(c));
        }
      }
    }
  }
  if (opts.profile && run.profile_overhead && !ways.empty())
    measure_profile_overhead(report, run, ways.front());
}

std::vector<uint64_t> ids_in(ShardRange range, uint64_t count, uint64_t seed) {
  if (range.count() == 0) return {};
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ids(count);
  for (auto& id : ids)
    id = std::uniform_int_distribution<uint64_t>(range.first, range.last - 1)(rng);
  return ids;
}

namespace {

/// The rounds of a pair at batch: up to four shares of ids, each whole batches, so that every
/// timed call of a batch-B cell reads B rows (a short call would spread its fixed cost over
/// fewer rows, on the floor's side and get_batch's alike). The rows after the last whole batch
/// are left out; none when ids are fewer than one batch.
std::vector<std::span<const uint64_t>> rounds_of(std::span<const uint64_t> ids, uint64_t batch) {
  constexpr uint64_t rounds = 4;
  const uint64_t whole = ids.size() / batch;
  const uint64_t share = (whole + rounds - 1) / rounds * batch;
  std::vector<std::span<const uint64_t>> parts;
  for (uint64_t first = 0; first < whole * batch; first += share)
    parts.push_back(ids.subspan(first, std::min(share, whole * batch - first)));
  return parts;
}

}  // namespace

void pair_with_floor(BenchReport& report, const StoreWay& way, const FloorPairing& pairing,
                     FabricFloorReader& reader, uint64_t row_bytes,
                     const std::vector<uint64_t>& batches, uint64_t seed) {
  const std::span<const uint64_t> ids = pairing.ids;
  warm_fabric_floor(reader, row_bytes, ids.size(), seed);
  for (uint64_t batch : batches) {
    const auto parts = rounds_of(ids, batch);
    if (parts.empty()) {
      report.note(
          fmt::format("no x_raw at {} B batch {}: {} rows of {} are fewer than one batch "
                      "(raise --samples or --cell-bytes)",
                      row_bytes, batch, ids.size(), pairing.peer));
      continue;
    }
    // "fabric:tcp" reads over what "fabric-raw:tcp" measures.
    BenchCell floor{.dims = {{"transport", "fabric-raw" + way.transport.substr(6)},
                             {"mode", "floor"},
                             {"row_bytes", row_bytes},
                             {"batch", batch},
                             {"threads", uint64_t{1}},
                             {"sharing", std::string("own")},
                             {"peer", pairing.peer},
                             {"provider", reader.provider()}}};
    BenchCell read{.dims = {{"transport", way.transport},
                            {"mode", way.mode},
                            {"row_bytes", row_bytes},
                            {"batch", batch},
                            {"threads", uint64_t{1}},
                            {"sharing", std::string("own")},
                            {"peer", pairing.peer}}};
    if (!way.dest.empty()) read.dims.emplace_back("dest", way.dest);
    for (std::size_t r = 0; r < parts.size(); ++r) {
      const auto floor_part = [&] {
        floor.merge(floor_cell(
            {row_bytes, batch, reader.run(row_bytes, parts[r].size(), batch, seed + r)}, {}));
      };
      const auto read_part = [&] {
        BenchCell c;
        run_cell(c, parts[r], {batch, 1, false}, way.reader);
        read.merge(c);
      };
      if (r % 2 == 0) {
        floor_part();
        read_part();
      } else {
        read_part();
        floor_part();
      }
    }
    if (floor.ns_per_row.mean() > 0)
      read.extras.emplace_back("x_raw", read.ns_per_row.mean() / floor.ns_per_row.mean());
    // The medians' ratio as well: a preempted call on a busy node moves a mean by more than
    // get_batch's cost over fi_read.
    if (const auto p50 = floor.ns_per_row.percentile(0.5); p50 > 0) {
      read.extras.emplace_back("x_raw_p50", static_cast<double>(read.ns_per_row.percentile(0.5)) /
                                                static_cast<double>(p50));
    }
    report.add(std::move(floor));
    report.add(std::move(read));
  }
}

void add_matrix_notes(BenchReport& report) {
  report.note(
      "x_floor: mean µs/row over the memcpy floor's (the same rows copied from one buffer) at the "
      "same row size and batch; cells without a peer read random rows of the whole dataset (an "
      "embedded rank's own rows among them, which every transport copies)");
  if (std::any_of(report.cells().begin(), report.cells().end(),
                  [](const BenchCell& c) { return c.extra("x_raw"); })) {
    report.note(
        "x_raw: mean µs/row of get_batch reading only the peer's rows over the raw fi_read "
        "floor's (fabric-raw) against the peer's memory, at the same row size and batch, measured "
        "in alternating rounds with the peer and every other rank in the same state; x_raw_p50: "
        "the same with p50 µs/row (each within 1/16)");
  }
  for (const auto& c : report.cells()) {
    const auto& transport = std::get<std::string>(*c.dim("transport"));
    if (transport == "memcpy" || c.dim("peer") || c.dim("profile") ||
        std::get<uint64_t>(*c.dim("threads")) != 1 ||
        std::get<std::string>(*c.dim("sharing")) != "own") {
      continue;
    }
    const auto batch = std::get<uint64_t>(*c.dim("batch"));
    std::vector<std::pair<std::string, BenchDim>> key{{"transport", transport},
                                                      {"mode", *c.dim("mode")},
                                                      {"row_bytes", *c.dim("row_bytes")},
                                                      {"threads", uint64_t{1}},
                                                      {"sharing", std::string("own")}};
    std::string dest;
    if (const auto* d = c.dim("dest")) {
      key.emplace_back("dest", *d);  // host and gpu cells of one transport are not comparable
      dest = " to " + std::get<std::string>(*d);
    }
    const auto* first = report.find(key);
    if (first == &c || c.ns_per_row.mean() <= 0) continue;
    report.note(fmt::format("{}{} {} B: batch {} costs {:.2f}x batch {} per row", transport, dest,
                            std::get<uint64_t>(*c.dim("row_bytes")),
                            std::get<uint64_t>(*first->dim("batch")),
                            first->ns_per_row.mean() / c.ns_per_row.mean(), batch));
  }
}

void run_bench_store(const BenchStoreOptions& opts, const CliContext& ctx) {
  check_matrix_options(opts);
  const bool served = !opts.store.empty();
  const bool embedded = !opts.synthetic.empty() || !opts.index.empty();
  if (served == embedded) {
    throw UsageError(
        "bench store needs --store DIR --dataset NAME (a running store) or --synthetic SIZES / "
        "--index DATASET.ddx (a Store embedded in this MPI job), not both");
  }
  if (served && opts.dataset.empty()) throw UsageError("bench store --store needs --dataset NAME");
  if (!served && opts.dests != std::vector<std::string>{"host"}) {
    // gpu.path is a reader setting of the Store, which would have to be loaded once per path.
    throw UsageError(
        "--dest is for a served store (--store DIR): embedded cells read into host memory");
  }
  if (opts.profile) profile::enable();
  if (served) {
    run_served(opts, ctx);
  } else {
    run_bench_store_embedded(opts, ctx);
  }
}

void setup_bench_store(CLI::App& bench, CliContext& ctx) {
  auto opts = std::make_shared<BenchStoreOptions>();
  auto* s = bench.add_subcommand(
      "store", "get_batch over transports, row sizes, batches, threads vs same-run floors");
  s->add_option("--store", opts->store,
                "Served: the running store's directory (default with --dataset: DDSTAGE_STORE)");
  s->add_option("--dataset", opts->dataset, "Served: the loaded dataset");
  s->add_option("--field", opts->field, "Field (required when the dataset has several)");
  s->add_option("--synthetic", opts->synthetic,
                "Embedded: generate datasets of these row sizes (3K,12.5K,200K,1M)")
      ->delimiter(',');
  s->add_option("--index", opts->index, "Embedded: load this real dataset (DATASET.ddx)");
  s->add_option("--transport", opts->transports,
                "Ways to read, comma-separated: served auto,shm,fabric[:PROVIDER]; embedded "
                "shm,mpi,mpi-alltoall,fabric[:PROVIDER]")
      ->delimiter(',');
  s->add_option("--batch", opts->batches, "Batch sizes (rows per call)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--threads", opts->threads, "Reader thread counts")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--sharing", opts->sharing,
                "own (a reader per thread), shared (one reader behind a lock)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--samples", opts->samples, "Random rows each cell reads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  s->add_option("--cell-bytes", opts->cell_bytes, "Bytes a cell reads at most (rows cut to fit)")
      ->capture_default_str();
  s->add_option("--synthetic-rows", opts->synthetic_rows,
                "Rows per generated dataset (default: 128 MiB worth)");
  s->add_option("--seed", opts->seed, "Seed for the random rows")->capture_default_str();
  s->add_option("--dest", opts->dests, "Served: where rows land, host and/or gpu")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--gpu-path", opts->gpu_paths,
                "GPU cells: direct and/or staged (the gpu.path setting)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--gpu", opts->gpu, "GPU cells: the device")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  s->add_flag("--profile", opts->profile,
              "Read profile per cell (where get_batch's time goes), and its overhead at batch 128");
  add_bench_output_options(*s, opts->out);
  s->callback([opts, &ctx] {
    opts->store = store_for_dataset(opts->store, opts->dataset, ctx);
    run_bench_store(*opts, ctx);
  });
}

}  // namespace ddstage::cli
