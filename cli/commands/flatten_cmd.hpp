// `ddstage flatten SRC... -o OUT.ddx`: build a byte-offset index of a dataset, once.
#pragma once

#include <CLI/CLI.hpp>

#include "ddstage/formats/format.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

/// What `flatten` was asked, as parsed from the command line.
struct FlattenOptions {
  std::vector<std::string> sources;
  std::string output;
  std::string format = "auto";
  std::vector<std::string> fields;
  std::string groups;
  std::vector<std::string> ragged;
  std::string name;
  bool pack = false;
  bool webdataset = false;
  bool force = false;
  bool json = false;  ///< `flatten --json`: what was done as one JSON object on stdout
};

void setup_flatten(CLI::App& app, CliContext& ctx);
/// Declares the flatten flags on app (shared with `bench flatten`).
void add_flatten_options(CLI::App& app, CliContext& ctx, FlattenOptions& opts);
/// Turns parsed flags into a format request; UsageError for malformed --field/--ragged.
formats::FlattenRequest make_request(const FlattenOptions& opts, const Settings& settings);

}  // namespace ddstage::cli
