// The served-store commands: serve, load, status, stop (read --store lives in read_cmd), and
// how every command finds its store.
#pragma once

#include <chrono>
#include <string>

#include <CLI/CLI.hpp>

#include "support/cli_context.hpp"
#include "ddstage/store_control.hpp"

namespace ddstage::cli {

void setup_serve(CLI::App& app, CliContext& ctx);
void setup_load(CLI::App& app, CliContext& ctx);
void setup_status(CLI::App& app, CliContext& ctx);
void setup_stop(CLI::App& app, CliContext& ctx);

/// The store directory of a command that needs one: its --store (flag), else the setting
/// `store` (DDSTAGE_STORE, config file). UsageError when neither names one.
std::string store_dir(const std::string& flag, const Settings& settings);

/// For commands whose --dataset NAME means a loaded dataset (read, bench store/loader): the
/// store is the flag, else, when a dataset is named, the setting `store`. Empty: no store.
std::string store_for_dataset(const std::string& flag, const std::string& dataset, const CliContext& ctx);

/// Control requests to the store in dir, with the control_timeout and peer_timeout settings.
StoreControl store_control(const std::string& dir, const Settings& settings);

/// "0-3", "0,2-5,7": ranks as a user reads them (sorted).
std::string rank_list(std::vector<int> ranks);

}  // namespace ddstage::cli
