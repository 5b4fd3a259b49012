#include "commands/read_cmd.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/id_spec.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "support/json_writer.hpp"
#include "support/npy_header.hpp"
#include "support/output_file.hpp"
#include "support/store_access.hpp"

namespace ddstage::cli {
namespace {

/// Bytes per batch handed to OriginReader: bounds memory for huge --ids lists.
constexpr uint64_t batch_bytes_limit = 64ull << 20;

struct ReadOptions {
  std::string dataset;
  std::string store;
  std::string name;
  std::string ids;
  std::string field;
  std::string output;
  bool verify = false;
  bool allow_stale = false;
  bool json = false;
  int gpu = -1;  // device number; -1: host memory
};

/// What a read did, for --json.
struct ReadResult {
  std::string source;  // "origin" or "store"
  std::string dataset;
  std::string field;
  uint64_t samples = 0;
  uint64_t bytes = 0;
};

/// Reads ids in batches of at most batch_bytes_limit (always at least one id) and writes each
/// to out: bounded memory for any --ids list. row_bytes(id) sizes a row; read(ids, dest) fills.
/// Returns the bytes written.
template <typename RowBytes, typename ReadBatch>
uint64_t copy_batches(const std::vector<uint64_t>& ids, OutputFile& out, RowBytes&& row_bytes,
                      ReadBatch&& read) {
  std::vector<std::byte> buffer;
  uint64_t total = 0;
  for (std::size_t begin = 0; begin < ids.size();) {
    std::size_t end = begin;
    uint64_t bytes = 0;
    while (end < ids.size() && (end == begin || bytes + row_bytes(ids[end]) <= batch_bytes_limit)) {
      bytes += row_bytes(ids[end++]);
    }
    buffer.resize(bytes);
    read(std::span(ids).subspan(begin, end - begin), std::span(buffer));
    out.write(buffer);
    total += bytes;
    begin = end;
  }
  return total;
}

/// Writes field's rows ids to the output: raw bytes, or a .npy (header first) when the name
/// ends in .npy; a field .npy cannot hold is refused before the output is created.
template <typename ReadBatch>
ReadResult write_rows(const std::string& output, const Index& index, uint32_t field,
                      const std::vector<uint64_t>& ids, ReadBatch&& read) {
  const auto& info = index.fields()[field];
  std::string header;
  if (is_npy_path(output)) header = npy_header(info, ids.size());
  OutputFile out(output);
  out.write(header);
  const auto bytes = copy_batches(
      ids, out, [&](uint64_t id) { return index.entry(id, field).length; }, read);
  out.commit();
  return {.field = info.name, .samples = ids.size(), .bytes = bytes};
}

/// --gpu: batches land in device memory through the reader's GPU path, then come back for the
/// output. The device memory is allocated before anything is read, so a node without a GPU
/// fails at once, and grows with the largest batch.
class DeviceRoundTrip {
 public:
  explicit DeviceRoundTrip(int device) : m_device(device), m_memory(device, m_bytes) {}

  void read(Reader& reader, const std::string& field, std::span<const uint64_t> ids,
            std::span<std::byte> dest, bool verify) {
    if (dest.size() > m_bytes) {
      m_memory = DeviceAllocation(m_device, dest.size());
      m_bytes = dest.size();
    }
    reader.get_batch(field, ids, m_memory.buffer(dest.size()), verify);
    m_memory.copy_to_host(dest);
  }

 private:
  int m_device;
  std::size_t m_bytes = 1 << 20;
  DeviceAllocation m_memory;
};

uint32_t pick_field(const Index& index, const std::string& field) {
  return field.empty() ? index.default_field() : index.field_id(field);
}

/// `read DATASET.ddx`: straight from the origin files.
ReadResult read_origin(const ReadOptions& opts, const Settings& settings) {
  auto index = Index::open(opts.dataset);
  const uint32_t field = pick_field(index, opts.field);
  const auto ids = parse_ids(opts.ids, index.samples());
  OriginReader reader(index,
                      {.verify = opts.verify,
                       .allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale")});
  auto r = write_rows(opts.output, index, field, ids,
                      [&](std::span<const uint64_t> batch, std::span<std::byte> dest) {
                        reader.read(field, batch, dest);
                      });
  r.source = "origin";
  r.dataset = opts.dataset;
  return r;
}

/// `read --store DIR --dataset NAME`: from a running store.
ReadResult read_store(const ReadOptions& opts, const Settings& settings) {
  if (!opts.dataset.empty())
    throw UsageError("give either DATASET.ddx or --store DIR --dataset NAME, not both");
  if (opts.name.empty())
    throw UsageError("--store needs --dataset NAME (see `ddstage status --store DIR`)");
  if (opts.allow_stale)
    throw UsageError("--allow-stale applies to reads from origin, not from a store");
  auto dataset = Client(opts.store, settings).open(opts.name);
  const auto& index = dataset.index();
  const uint32_t field = pick_field(index, opts.field);
  const auto& field_name = index.fields()[field].name;
  const auto ids = parse_ids(opts.ids, index.samples());
  auto reader = dataset.reader();
  std::optional<DeviceRoundTrip> device;
  if (opts.gpu >= 0) device.emplace(opts.gpu);
  auto r = write_rows(opts.output, index, field, ids,
                      [&](std::span<const uint64_t> batch, std::span<std::byte> dest) {
                        if (device)
                          return device->read(reader, field_name, batch, dest, opts.verify);
                        reader.get_batch(field_name, batch, dest, opts.verify);
                      });
  r.source = "store";
  r.dataset = opts.name;
  return r;
}

/// Binary on a terminal garbles it and helps nobody; --json's document and the samples cannot
/// share stdout.
void check_output(const ReadOptions& opts) {
  const bool to_stdout = opts.output.empty() || (opts.output != "-" && names_stdout(opts.output));
  if (to_stdout && ::isatty(STDOUT_FILENO) == 1)
    throw UsageError(
        "refusing to write binary samples to a terminal; use -o FILE, or -o - to force");
  if (opts.json && names_stdout(opts.output))
    throw UsageError("--json needs -o FILE: stdout carries the samples");
}

void print_read_json(const ReadOptions& opts, const ReadResult& r, double seconds) {
  JsonWriter j;
  j.begin_object()
      .field("source", r.source)
      .field("dataset", r.dataset)
      .field("field", r.field)
      .field("samples", r.samples)
      .field("bytes", r.bytes);
  j.field("seconds", seconds)
      .field("bytes_per_second", static_cast<double>(r.bytes) / seconds)
      .field("output", opts.output)
      .field("output_format", is_npy_path(opts.output) ? "npy" : "raw")
      .field("verified", opts.verify)
      .end_object();
  fmt::print("{}\n", j.str());
}

void run_read(ReadOptions opts, const CliContext& ctx) {
  check_output(opts);
  auto settings = ctx.resolve_settings();
  // A loaded dataset's name without --store: the store is the setting's (DDSTAGE_STORE).
  if (opts.store.empty() && opts.dataset.empty() && !opts.name.empty())
    opts.store = store_dir({}, settings);
  const auto t0 = std::chrono::steady_clock::now();
  ReadResult r;
  if (!opts.store.empty()) {
    r = read_store(opts, settings);
  } else {
    if (opts.dataset.empty())
      throw UsageError("read needs DATASET.ddx, or --store DIR --dataset NAME");
    if (opts.gpu >= 0)
      throw UsageError("--gpu reads from a store: give --store DIR --dataset NAME");
    r = read_origin(opts, settings);
  }
  const double seconds =
      std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9);
  if (opts.json) print_read_json(opts, r, seconds);
}

}  // namespace

void setup_read(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<ReadOptions>();
  auto* sub = app.add_subcommand("read",
                                 "Write samples' raw bytes (or a .npy), concatenated in the order "
                                 "asked, from origin or a store");
  sub->add_option("dataset", opts->dataset,
                  "The index directory (DATASET.ddx): read straight from origin");
  sub->add_option(
      "--store", opts->store,
      "Read from the running store in this directory instead (default with --dataset: the setting "
      "store, DDSTAGE_STORE)");
  sub->add_option("--dataset", opts->name, "With --store: the loaded dataset's name");
  sub->add_option("--ids", opts->ids,
                  "Sample ids: 0,7,10-19 (inclusive ranges) or @FILE (one per line)")
      ->required();
  sub->add_option("--field", opts->field, "Field to read (required when the dataset has several)");
  sub->add_option("-o,--output", opts->output,
                  "Output file; FILE.npy writes a numpy array (fixed-size fields); - is stdout "
                  "(default: stdout, refused when it is a terminal)");
  sub->add_flag("--verify", opts->verify, "Check every sample's checksum (exit 1 on mismatch)");
  sub->add_option(
         "--gpu", opts->gpu,
         "With --store: read into memory of this GPU (by gpu.path: direct, staged, auto), then "
         "copy back for the output")
      ->check(CLI::NonNegativeNumber);
  add_setting_option(*sub, ctx, "--gpu-path", "gpu.path", "With --gpu: direct, staged or auto");
  sub->add_flag("--allow-stale", opts->allow_stale, "Read sources that changed after flattening");
  sub->add_flag("--json", opts->json,
                "With -o FILE: print what was done as one JSON object (samples, bytes, seconds, "
                "rate)");
  sub->callback([opts, &ctx] { run_read(*opts, ctx); });
}

}  // namespace ddstage::cli
