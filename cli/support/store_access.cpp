#include "support/store_access.hpp"

#include <algorithm>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"

namespace ddstage::cli {

void add_store_option(CLI::App& sub, std::string& store) {
  sub.add_option(
      "--store", store,
      "The store directory (holds store.yaml); default: the setting store (DDSTAGE_STORE)");
}

std::string store_dir(const std::string& flag, const Settings& settings) {
  if (!flag.empty()) return flag;
  const auto& dir = settings.get_string("store");
  if (dir.empty()) throw UsageError("no store: pass --store DIR or set DDSTAGE_STORE");
  return dir;
}

std::string store_for_dataset(const std::string& flag, const std::string& dataset,
                              const CliContext& ctx) {
  if (!flag.empty() || dataset.empty()) return flag;
  return ctx.resolve_settings().get_string("store");
}

StoreControl store_control(const std::string& dir, const Settings& settings) {
  return StoreControl(dir, settings.get_duration("control_timeout"),
                      settings.get_duration("peer_timeout"));
}

uint64_t parse_mem_limit(const std::string& text) {
  if (text.empty()) return 0;
  auto v = parse_size(text);
  if (!v || *v == 0) throw UsageError("bad --mem-limit '" + text + "' (a size like 8G)");
  return *v;
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) +
           (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

}  // namespace ddstage::cli
