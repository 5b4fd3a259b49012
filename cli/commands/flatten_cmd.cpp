#include "commands/flatten_cmd.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "support/json_writer.hpp"
#include "support/progress_line.hpp"

namespace ddstage::cli {
namespace {

/// "NAME=PATH" or "PATH"; the format fills an empty name in from the path.
formats::FieldSpec parse_field(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos) return {"", text};
  if (eq == 0 || eq + 1 == text.size())
    throw UsageError("bad --field '" + text + "' (expected NAME=PATH or PATH)");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

formats::RaggedSpec parse_ragged(const std::string& text) {
  auto eq = text.find('=');
  auto colon = text.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos || colon == eq + 1 ||
      colon + 1 == text.size()) {
    throw UsageError("bad --ragged '" + text + "' (expected NAME=DATA_PATH:OFFSETS_PATH)");
  }
  return {text.substr(0, eq), text.substr(eq + 1, colon - eq - 1), text.substr(colon + 1)};
}

void print_flatten_json(const FlattenOptions& opts, const Index& index, const IndexWriter& writer,
                        double seconds) {
  JsonWriter j;
  j.begin_object()
      .field("output", opts.output)
      .field("dataset", index.manifest().name)
      .field("format", index.manifest().format)
      .field("samples", index.samples());
  j.key("fields").begin_array();
  for (const auto& f : index.fields()) j.value(f.name);
  j.end_array()
      .field("bytes_indexed", writer.bytes_written())
      .field("bytes_packed", writer.packed_bytes())
      .field("seconds", seconds)
      .field("bytes_per_second", static_cast<double>(writer.bytes_written()) / seconds);
  j.end_object();
  fmt::print("{}\n", j.str());
}

void run_flatten(const FlattenOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  auto request = make_request(opts, settings);
  ProgressLine progress("flatten", settings);
  const auto t0 = std::chrono::steady_clock::now();
  IndexWriter writer({.out = opts.output,
                      .force = opts.force,
                      .pack_bytes = settings.get_size("flatten.pack_size"),
                      .name = opts.name,
                      .progress = [&progress](const ProgressUpdate& p) { progress(p); }});
  formats::flatten(request, writer);
  writer.commit();
  const double seconds =
      std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9);
  auto index = Index::open(opts.output);
  if (opts.json) return print_flatten_json(opts, index, writer, seconds);
  ctx.note("{}: {} samples, {} field(s), {} indexed ({} copied into pack files), format {}\n",
           opts.output, index.samples(), index.fields().size(),
           human_bytes(static_cast<double>(writer.bytes_written())),
           human_bytes(static_cast<double>(writer.packed_bytes())), index.manifest().format);
}

}  // namespace

formats::FlattenRequest make_request(const FlattenOptions& opts, const Settings& settings) {
  formats::FlattenRequest r;
  r.sources = opts.sources;
  r.format = opts.format;
  for (const auto& f : opts.fields) r.fields.push_back(parse_field(f));
  for (const auto& g : opts.ragged) r.ragged.push_back(parse_ragged(g));
  r.groups = opts.groups;
  r.pack = opts.pack;
  r.webdataset = opts.webdataset;
  // Beside the output: that file system has room for the packs a decoded shard becomes.
  if (!opts.output.empty()) r.scratch_dir = std::filesystem::absolute(opts.output).parent_path();
  r.memory_budget = settings.get_size("flatten.memory");
  return r;
}

void add_flatten_options(CLI::App& app, CliContext& ctx, FlattenOptions& opts) {
  app.add_option("sources", opts.sources, "Source files, directories, or @LIST (one path per line)")
      ->required();
  app.add_option("--format", opts.format, "Source format: auto, hdf5, npy, tar, files")
      ->capture_default_str();
  app.add_option("--field", opts.fields,
                 "HDF5: a field NAME=PATH or NAME=/DATASET.MEMBER (or PATH; name = last path "
                 "component); npy: NAME=FILE.npy, NAME=ARCHIVE.npz/MEMBER or an array's name");
  app.add_option("--groups", opts.groups,
                 "HDF5: one sample per group matching this glob, e.g. '/samples/*'");
  app.add_option("--ragged", opts.ragged, "HDF5: a CSR field NAME=DATA_PATH:OFFSETS_PATH");
  app.add_flag("--webdataset", opts.webdataset,
               "tar: one sample per WebDataset key (000123.jpg, 000123.cls -> fields jpg, cls)");
  app.add_flag("--pack", opts.pack,
               "Copy every sample into pack files (~256 MiB each) instead of indexing in place");
  app.add_option("--name", opts.name, "Dataset name (default: the output's stem)");
  add_setting_option(app, ctx, "--pack-size", "flatten.pack_size",
                     "Pack file size (e.g. 256M, 1GiB: K/M/G/T, with or without B/iB, are binary)");
  add_setting_option(app, ctx, "--memory", "flatten.memory",
                     "Memory for decoding chunks and blocks (e.g. 64M)");
}

void setup_flatten(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<FlattenOptions>();
  auto* sub =
      app.add_subcommand("flatten", "Build a byte-offset index (DATASET.ddx) of a dataset, once");
  add_flatten_options(*sub, ctx, *opts);
  sub->add_option("-o,--output", opts->output, "The index directory to create (NAME.ddx)")
      ->required();
  sub->add_flag("--force", opts->force, "Replace an existing index, once the new one is complete");
  sub->add_flag("--json", opts->json,
                "Print what was done as one JSON object (samples, bytes, seconds, rate) instead "
                "of the result line");
  sub->callback([opts, &ctx] { run_flatten(*opts, ctx); });
}

}  // namespace ddstage::cli
