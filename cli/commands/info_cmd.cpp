#include "commands/info_cmd.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/fabric_info.hpp"
#include "ddstage/tool/gpu_info.hpp"
#include "ddstage/tool/origin_verify.hpp"
#include "ddstage/tool/transport_info.hpp"
#include "support/json_writer.hpp"
#include "support/progress_line.hpp"

namespace ddstage::cli {
namespace {

struct InfoOptions {
  std::string dataset;
  bool json = false;
  bool verify = false;
  bool allow_stale = false;
  bool settings = false;
  bool fabric = false;
  bool gpu = false;
};

/// Per-field row sizes, from the entries (variable fields differ per sample).
struct FieldStats {
  uint64_t bytes = 0;
  uint64_t min = std::numeric_limits<uint64_t>::max();
  uint64_t max = 0;
};

std::vector<FieldStats> field_stats(const Index& index) {
  std::vector<FieldStats> stats(index.fields().size());
  for (uint32_t f = 0; f < stats.size(); ++f) {
    const auto s = index.field_stats(f);  // O(runs): a few runs may stand for 2^40 rows
    stats[f] = {s.bytes, s.min_row, s.max_row};
  }
  return stats;
}

std::string shape_text(const FieldInfo& f) {
  std::string dims = fmt::format("{}", fmt::join(f.shape, ", "));
  if (f.variable) return dims.empty() ? "[*]" : "[*, " + dims + "]";
  return "[" + dims + "]";
}

std::size_t count_files(const Index& index, FileKind kind) {
  return static_cast<std::size_t>(std::count_if(index.files().begin(), index.files().end(),
                                                [kind](const auto& f) { return f.kind == kind; }));
}

// What the dtype column cannot say: a record's members, a text encoding, an enum's names.
void print_type_details(const FieldInfo& f) {
  std::vector<std::string> members;
  for (const auto& m : f.members) {
    members.push_back(
        fmt::format("{} {}{} @{}", m.name, dtype_name(m.dtype),
                    m.shape.empty() ? "" : fmt::format("[{}]", fmt::join(m.shape, ",")), m.offset));
  }
  if (!members.empty()) fmt::print("    members   {}\n", fmt::join(members, ", "));
  if (!f.encoding.empty()) fmt::print("    encoding  {}\n", f.encoding);
  std::vector<std::string> names;
  for (const auto& e : f.enum_names) names.push_back(fmt::format("{}={}", e.name, e.value));
  if (!names.empty()) fmt::print("    enum      {}\n", fmt::join(names, ", "));
}

void print_text(const Index& index, const std::vector<FieldStats>& stats) {
  const auto& m = index.manifest();
  fmt::print("dataset   {}\nformat    {} (root {})\nsamples   {}\nbytes     {}\n", m.name, m.format,
             m.root.string(), index.samples(), human_bytes(static_cast<double>(m.total_bytes)));
  fmt::print("files     {} source ({} copied into packs), {} pack\ncreated   {} by ddstage {}\n",
             count_files(index, FileKind::source) + count_files(index, FileKind::copied),
             count_files(index, FileKind::copied), count_files(index, FileKind::pack), m.created,
             m.tool_version);
  uint64_t runs = 0, blocks = 0;
  for (uint32_t f = 0; f < index.fields().size(); ++f) {
    runs += index.runs(f);
    blocks += index.blocks(f);
  }
  // What the index itself costs: runs grow with files and packs, not rows (ddstage-index(5)).
  fmt::print("index     {} runs, {} checksum blocks\n", runs, blocks);
  if (!m.attributes.empty()) fmt::print("attributes\n");
  for (const auto& [k, v] : m.attributes) fmt::print("  {:<16} {}\n", k, v);
  fmt::print("fields\n  {:<16} {:<10} {:<16} {:<24} {}\n", "name", "dtype", "shape", "bytes/row",
             "source");
  for (uint32_t i = 0; i < stats.size(); ++i) {
    const auto& f = index.fields()[i];
    const auto mean = static_cast<double>(stats[i].bytes) / static_cast<double>(index.samples());
    std::string rows = f.variable
                           ? fmt::format("{}-{} (mean {:.0f})", stats[i].min, stats[i].max, mean)
                           : std::to_string(f.row_bytes);
    fmt::print("  {:<16} {:<10} {:<16} {:<24} {}\n", f.name, dtype_name(f.dtype), shape_text(f),
               rows, f.source);
    print_type_details(f);
  }
}

// Only where present, like manifest.yaml, so plain fields look as they always did.
void write_type_details(JsonWriter& j, const FieldInfo& f) {
  if (!f.members.empty()) {
    j.key("members").begin_array();
    for (const auto& m : f.members) {
      j.begin_object()
          .field("name", m.name)
          .field("dtype", dtype_name(m.dtype))
          .field("offset", m.offset);
      j.key("shape").begin_array();
      for (auto d : m.shape) j.value(d);
      j.end_array().end_object();
    }
    j.end_array();
  }
  if (!f.encoding.empty()) j.field("encoding", f.encoding);
  if (!f.enum_names.empty()) {
    j.key("enum").begin_object();
    for (const auto& e : f.enum_names) j.field(e.name, e.value);
    j.end_object();
  }
}

void print_json(const Index& index, const std::vector<FieldStats>& stats,
                const VerifyReport* verify) {
  const auto& m = index.manifest();
  JsonWriter j;
  j.begin_object()
      .field("dataset", m.name)
      .field("path", index.dir().string())
      .field("format", m.format);
  j.field("root", m.root.string())
      .field("samples", index.samples())
      .field("total_bytes", m.total_bytes);
  j.field("source_files",
          count_files(index, FileKind::source) + count_files(index, FileKind::copied));
  j.field("copied_source_files", count_files(index, FileKind::copied));
  j.field("pack_files", count_files(index, FileKind::pack));
  j.field("created", m.created).field("tool_version", m.tool_version);
  j.key("attributes").begin_object();
  for (const auto& [k, v] : m.attributes) j.field(k, v);
  j.end_object().key("fields").begin_array();
  for (uint32_t i = 0; i < stats.size(); ++i) {
    const auto& f = index.fields()[i];
    j.begin_object()
        .field("name", f.name)
        .field("dtype", dtype_name(f.dtype))
        .key("shape")
        .begin_array();
    for (auto d : f.shape) j.value(d);
    j.end_array()
        .field("variable", f.variable)
        .field("row_bytes", f.row_bytes)
        .field("source", f.source);
    write_type_details(j, f);
    j.field("runs", index.runs(i)).field("blocks", index.blocks(i));
    j.field("bytes", stats[i].bytes)
        .field("min_row_bytes", stats[i].min)
        .field("max_row_bytes", stats[i].max);
    j.end_object();
  }
  j.end_array();
  if (verify) {
    j.key("verify")
        .begin_object()
        .field("entries", verify->entries_checked)
        .field("failures", verify->failures);
    j.key("first_failures").begin_array();
    for (const auto& f : verify->first_failures) {
      j.begin_object()
          .field("sample", f.sample)
          .field("field", f.field)
          .field("reason", f.reason)
          .end_object();
    }
    j.end_array().end_object();
  }
  j.end_object();
  fmt::print("{}\n", j.str());
}

/// The transport registry's entries and what their probes find on this node.
void print_transports(const std::vector<TransportInfo>& transports) {
  fmt::print("transports (the values of the transport options; whether this node can use each):\n");
  for (const auto& t : transports) {
    fmt::print("  {:<8} {:<11} {}{}\n", t.name, t.available ? "available" : "unavailable",
               t.description, t.available ? "" : ": " + t.why_not);
  }
}

TransportInfo fabric_transport() {
  const auto all = describe_transports();
  return *std::find_if(all.begin(), all.end(),
                       [](const TransportInfo& t) { return t.name == "fabric"; });
}

std::string config_text(const Settings& settings) {
  const auto& config = settings.config_path();
  return config.empty()            ? "(none)"
         : settings.config_found() ? config.string()
                                   : config.string() + " (not present)";
}

void print_settings_json(const Settings& settings) {
  JsonWriter j;
  j.begin_object()
      .field("config_file", settings.config_path().string())
      .field("config_found", settings.config_found());
  j.key("settings").begin_object();
  for (const auto& d : setting_table()) {
    j.key(d.key)
        .begin_object()
        .field("value", settings.get_string(d.key))
        .field("source", source_name(settings.source(d.key)))
        .field("default", d.default_value)
        .field("environment", d.env_name())
        .field("help", d.help)
        .end_object();
  }
  j.end_object().key("build").begin_object();
  j.field("mpi", DDSTAGE_HAVE_MPI != 0).field("libfabric", DDSTAGE_HAVE_FABRIC != 0);
  j.field("hdf5", DDSTAGE_HAVE_HDF5 != 0)
      .field("cuda", DDSTAGE_HAVE_CUDA != 0)
      .field("hip", DDSTAGE_HAVE_HIP != 0);
  j.end_object().key("transports").begin_array();
  for (const auto& t : describe_transports()) {
    j.begin_object().field("name", t.name).field("available", t.available);
    j.field("description", t.description).field("why_not", t.why_not).end_object();
  }
  j.end_array().end_object();
  fmt::print("{}\n", j.str());
}

void print_settings(const Settings& settings, bool json) {
  if (json) return print_settings_json(settings);
  fmt::print("config file: {}\n", config_text(settings));
  fmt::print("{:<20} {:<10} {:<8} {:<28} {}\n", "setting", "value", "source", "environment",
             "help");
  for (const auto& d : setting_table()) {
    // An empty value printed as "" keeps the columns apart for readers and scripts.
    const auto& value = settings.get_string(d.key);
    fmt::print("{:<20} {:<10} {:<8} {:<28} {}\n", d.key, value.empty() ? "\"\"" : value,
               source_name(settings.source(d.key)), d.env_name(), d.help);
  }
  fmt::print("build: MPI={} libfabric={} HDF5={} CUDA={} HIP={}\n", DDSTAGE_HAVE_MPI,
             DDSTAGE_HAVE_FABRIC, DDSTAGE_HAVE_HDF5, DDSTAGE_HAVE_CUDA, DDSTAGE_HAVE_HIP);
  print_transports(describe_transports());
}

void print_fabric(const Settings& settings, bool json) {
  const auto rows = describe_fabric_providers(settings);
  const TransportInfo transport = fabric_transport();
  const auto chosen =
      std::find_if(rows.begin(), rows.end(), [](const auto& r) { return r.chosen; });
  const std::string wanted = settings.get_string("fabric.provider");
  const std::string domain = settings.get_string("fabric.domain");
  if (json) {
    JsonWriter j;
    j.begin_object().field("provider_setting", wanted).field("domain_setting", domain);
    j.field("transport_available", transport.available)
        .field("transport_why_not", transport.why_not);
    j.key("providers").begin_array();
    for (const auto& r : rows) {
      j.begin_object()
          .field("provider", r.provider)
          .field("fabric", r.fabric)
          .field("domain", r.domain);
      j.field("mr_mode", r.mr_mode)
          .field("max_msg_size", r.max_msg_size)
          .field("progress", r.progress);
      j.field("chosen", r.chosen).field("why", r.why).end_object();
    }
    j.end_array().end_object();
    fmt::print("{}\n", j.str());
  } else {
    fmt::print("fabric.provider={} fabric.domain={}\n", wanted, domain.empty() ? "(any)" : domain);
    fmt::print("  {:<14} {:<16} {:<8} {:<20} {:>9} {:<8} {}\n", "provider", "fabric", "domain",
               "mr_mode", "max_msg", "progress", "why");
    for (const auto& r : rows) {
      // Providers without a limit report 2^64-1 or close to it.
      const std::string max_msg = r.max_msg_size >= (uint64_t{1} << 62)
                                      ? "any"
                                      : human_bytes(static_cast<double>(r.max_msg_size));
      fmt::print("{} {:<14} {:<16} {:<8} {:<20} {:>9} {:<8} {}\n", r.chosen ? '*' : ' ', r.provider,
                 r.fabric, r.domain, r.mr_mode, max_msg, r.progress, r.why);
    }
    if (chosen == rows.end())
      fmt::print("picked: none\n");
    else
      fmt::print("picked: {} in domain {}\n", chosen->provider, chosen->domain);
    fmt::print("transport fabric: {}\n",
               transport.available ? "available" : "unavailable: " + transport.why_not);
  }
  if (chosen == rows.end()) {
    std::fflush(stdout);
    throw UsageError("fabric.provider '" + wanted + "'" +
                     (domain.empty() ? "" : " in domain '" + domain + "'") +
                     " is not available on this node (listed above)");
  }
}

/// The GPU runtimes built in, what each finds here, and what gpu.path=auto would pick. A node
/// without a GPU is a normal answer (exit 0), not an error.
void print_gpu(const Settings& settings, bool json) {
  const auto runtimes = gpu_info();
  const auto cached = cached_gpu_path();
  const std::string cache_file = gpu_path_cache_file().string();
  if (json) {
    JsonWriter j;
    j.begin_object().field("gpu_path_setting", settings.get_string("gpu.path"));
    j.field("cached_path", cached ? std::string(gpu_path_name(*cached)) : std::string());
    j.field("cache_file", cache_file).key("runtimes").begin_array();
    for (const auto& r : runtimes) {
      j.begin_object().field("runtime", memory_kind_name(r.kind)).field("devices", r.devices);
      j.field("reason", r.reason).key("device_names").begin_array();
      for (const auto& name : r.device_names) j.value(name);
      j.end_array().key("host_register_read_only").begin_array();
      for (const bool read_only : r.host_register_read_only) j.value(read_only);
      j.end_array().end_object();
    }
    j.end_array().end_object();
    fmt::print("{}\n", j.str());
    return;
  }
  if (runtimes.empty()) {
    fmt::print(
        "runtimes: none (built without CUDA and HIP: configure with -DDDSTAGE_WITH_CUDA=ON or "
        "-DDDSTAGE_WITH_HIP=ON)\n");
  }
  for (const auto& r : runtimes) {
    if (r.devices == 0) {
      fmt::print("{}: no GPU: {}\n", memory_kind_name(r.kind), r.reason);
      continue;
    }
    fmt::print("{}: {} device(s)\n", memory_kind_name(r.kind), r.devices);
    for (std::size_t d = 0; d < r.device_names.size(); ++d) {
      fmt::print("  {}: {} (read-only host registration: {})\n", d, r.device_names[d],
                 r.host_register_read_only[d] ? "yes" : "no: direct copies are pageable");
    }
  }
  fmt::print("gpu.path={} (auto: {}, from {})\n", settings.get_string("gpu.path"),
             cached ? gpu_path_name(*cached) : "staged", cached ? cache_file : "no bench result");
}

/// Prints the failures and throws, so the exit code says the data is bad.
void report_failures(const VerifyReport& r) {
  std::fflush(stdout);  // the table first, then the verdict, also when both go to one pipe
  if (r.failures == 0) {
    spdlog::info("verified {} entries ({}): all checksums match", r.entries_checked,
                 human_bytes(static_cast<double>(r.bytes_checked)));
    return;
  }
  for (const auto& f : r.first_failures) {
    fmt::print(stderr, "ddstage: mismatch: sample {} field {}: {}\n", f.sample, f.field, f.reason);
  }
  throw ChecksumError(fmt::format(
      "verify failed: {} of {} entries do not match the index (first: sample {} field {})",
      r.failures, r.entries_checked, r.first_failures.front().sample,
      r.first_failures.front().field));
}

void run_info(const InfoOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  if (opts.settings) return print_settings(settings, opts.json);
  if (opts.fabric) return print_fabric(settings, opts.json);
  if (opts.gpu) return print_gpu(settings, opts.json);
  if (opts.dataset.empty())
    throw UsageError("info needs a DATASET.ddx (or --settings, --fabric, --gpu)");
  auto index = Index::open(opts.dataset);
  const bool allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale");
  if (!allow_stale) index.check_all_fresh();
  auto stats = field_stats(index);
  std::optional<VerifyReport> report;
  if (opts.verify) {
    ProgressLine progress("verify", settings);
    report =
        verify_origin(index, {.threads = thread_count(settings),
                              .allow_stale = allow_stale,
                              .progress = [&progress](const ProgressUpdate& p) { progress(p); }});
  }
  if (opts.json) {
    print_json(index, stats, report ? &*report : nullptr);
  } else {
    print_text(index, stats);
  }
  if (report) report_failures(*report);
}

}  // namespace

void setup_info(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<InfoOptions>();
  auto* sub = app.add_subcommand(
      "info", "Show what an index holds; --verify re-reads every sample from origin");
  sub->add_option("dataset", opts->dataset, "The index directory (DATASET.ddx)");
  sub->add_flag("--json", opts->json,
                "Print JSON instead of a table (also with --settings, --fabric, --gpu)");
  sub->add_flag("--verify", opts->verify,
                "Re-read every sample from origin and check its checksum (exit 1 on mismatch)");
  sub->add_flag("--allow-stale", opts->allow_stale,
                "Do not refuse sources that changed after flattening");
  sub->add_flag("--settings", opts->settings,
                "Print every setting, its value and where it came from");
  sub->add_flag(
      "--fabric", opts->fabric,
      "List the libfabric providers this node offers and which fabric.provider/fabric.domain pick");
  sub->add_flag(
      "--gpu", opts->gpu,
      "Show the GPU runtimes this ddstage was built with, the devices they find (or why none) "
      "and the gpu.path auto picks");
  add_setting_option(*sub, ctx, "--threads", "threads",
                     "Threads for --verify (default: one per core)");
  sub->callback([opts, &ctx] { run_info(*opts, ctx); });
}

}  // namespace ddstage::cli
