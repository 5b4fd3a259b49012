// How the commands that talk to a running store (serve, wait, load, status, stop, read, bench)
// find it and address it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ddstage/tool/store_control.hpp"
#include "support/cli_context.hpp"

namespace ddstage::cli {

/// Declares --store DIR on sub, for a command that needs one (see store_dir).
void add_store_option(CLI::App& sub, std::string& store);

/// The store directory of a command that needs one: its --store (flag), else the setting
/// `store` (DDSTAGE_STORE, config file). UsageError when neither names one.
std::string store_dir(const std::string& flag, const Settings& settings);

/// For commands whose --dataset NAME means a loaded dataset (read, bench store/loader): the
/// store is the flag, else, when a dataset is named, the setting `store`. Empty: no store.
std::string store_for_dataset(const std::string& flag, const std::string& dataset,
                              const CliContext& ctx);

/// Control requests to the store in dir, with the control_timeout and peer_timeout settings.
StoreControl store_control(const std::string& dir, const Settings& settings);

/// --mem-limit's bytes (serve, load): a size like 8G; 0 when not given.
uint64_t parse_mem_limit(const std::string& text);

/// "0-3", "0,2-5,7": ranks as a user reads them (sorted).
std::string rank_list(std::vector<int> ranks);

}  // namespace ddstage::cli
