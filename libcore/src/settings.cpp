#include "ddstage/settings.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"
#include "yaml_limits.hpp"

extern char** environ;

namespace ddstage {
namespace {

constexpr std::array<SettingDef, 21> table{{
    {"log.level", SettingType::string, "info", "log level: trace, debug, info, warn, error, off",
     "trace|debug|info|warn|error|off"},
    {"progress", SettingType::string, "auto",
     "progress line on stderr: auto (when a terminal), always, never", "auto|always|never"},
    {"threads", SettingType::integer, "0", "threads for info --verify (0: one per core)"},
    {"flatten.pack_size", SettingType::size, "256M", "start a new pack file past this size"},
    {"flatten.memory", SettingType::size, "64M",
     "memory a format may use to decode (whole chunks, blocks)"},
    {"origin.allow_stale", SettingType::boolean, "false",
     "read sources that changed after flattening"},
    {"fabric.provider", SettingType::string, "auto",
     "libfabric provider: auto, or a name such as cxi, verbs, efa, tcp, net, shm (tcp matches "
     "tcp;ofi_rxm)"},
    {"fabric.domain", SettingType::string, "",
     "libfabric domain or interface (lo, hsn0, mlx5_0); empty: the provider's first"},
    {"fabric.window", SettingType::integer, "128", "fabric reads a reader keeps in flight"},
    {"fabric.inflight_bytes", SettingType::size, "4M",
     "bytes of fabric reads a reader keeps in flight"},
    {"fabric.progress", SettingType::string, "adaptive",
     "how a server rank's fabric progress thread waits: adaptive (polls for fabric.spin after "
     "reads arrive, sleeps when idle), sleep (always sleeps: no idle cost, ~20 us more per "
     "read over tcp), spin (always polls: a core per rank)",
     "adaptive|sleep|spin"},
    {"fabric.spin", SettingType::duration, "1ms",
     "with fabric.progress=adaptive: how long the progress thread polls after reads arrive"},
    {"transport", SettingType::string, "auto",
     "how store reads travel: auto (shm on this node, fabric to other nodes), shm, or fabric "
     "(every rank over libfabric, even on this node); for serve: what the ranks offer",
     "auto|shm|fabric"},
    {"tier", SettingType::string, "memory",
     "for serve: where each rank places its shard regions, first tier with room first: memory "
     "(up to --mem-limit), then files on node-local storage, nvme:DIR or nvme:DIR:SIZE "
     "(\"memory,nvme:/local/scratch/ddstage:500G\")"},
    {"read_timeout", SettingType::duration, "10s",
     "a read batch fails when its peers make no progress for this long (500ms, 10s, 2m)"},
    {"failover_timeout", SettingType::duration, "2s",
     "with replicas (load --replicas): a reader gives up a rank whose reads made no progress for "
     "this long and reads its samples from another copy in the same call"},
    {"store", SettingType::string, "",
     "the store directory (holds store.yaml) for commands that take --store; a job script exports "
     "DDSTAGE_STORE once"},
    {"control_timeout", SettingType::duration, "30s",
     "a control request (load, status, stop, wait) fails when the store sends nothing for this "
     "long; "
     "while its ranks load, every load (terminal or job script) gets a keepalive at least every 5 "
     "s: "
     "keep this above 5 s"},
    {"peer_timeout", SettingType::duration, "30s",
     "a server rank that hears nothing from rank 0 for this long ends itself and frees its "
     "memory; rank 0 marks a rank it has not heard from for this long lost, and serves on"},
    {"gpu.path", SettingType::string, "auto",
     "how get_batch reaches GPU memory: direct (mapped rows copied straight to the device), staged "
     "(through a pinned host buffer, one copy per batch), auto (what bench found faster here, else "
     "staged)",
     "direct|staged|auto"},
    {"profile", SettingType::string, "",
     "read profile, printed at exit: empty or 0 off; 1 to stderr; else a file (%p: pid, %h: host)"},
}};

const SettingDef* find_def(std::string_view key) {
  for (const auto& d : table) {
    if (d.key == key) return &d;
  }
  return nullptr;
}

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(std::string_view v) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return out;
}

void check_type(const SettingDef& d, const std::string& value, std::string_view origin) {
  bool ok = true;
  switch (d.type) {
    case SettingType::boolean:
      ok = parse_bool(value).has_value();
      break;
    case SettingType::integer:
      ok = parse_int(value).has_value();
      break;
    case SettingType::size:
      ok = parse_size(value).has_value();
      break;
    case SettingType::duration:
      ok = parse_duration(value).has_value();
      break;
    case SettingType::string:
      ok = d.choices.empty() ||
           ("|" + std::string(d.choices) + "|").find("|" + value + "|") != std::string::npos;
      break;
  }
  if (!ok) {
    std::string expected = d.choices.empty() ? "" : " (one of " + std::string(d.choices) + ")";
    throw UsageError("bad value '" + value + "' for setting " + std::string(d.key) + " from " +
                     std::string(origin) + expected);
  }
}

/// Flattens nested YAML maps into dotted keys ("flatten: {pack_size: 1G}" -> "flatten.pack_size").
/// The depth is bounded by config_yaml_limits.
void flatten_yaml(const YAML::Node& node, const std::string& prefix, const std::string& file,
                  std::map<std::string, std::string>& out) {
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      throw UsageError(file + ": a key " + (prefix.empty() ? "" : "under " + prefix + " ") +
                       "is not a plain name");
    }
    std::string key = prefix + kv.first.Scalar();
    if (kv.second.IsMap()) {
      flatten_yaml(kv.second, key + ".", file, out);
    } else if (kv.second.IsScalar()) {
      out[key] = kv.second.Scalar();
    } else {
      throw UsageError(file + ": setting " + key + " must be a single value");
    }
  }
}

std::map<std::string, std::string> read_config(const std::filesystem::path& path) {
  const std::string name = "config file " + path.string();
  const YAML::Node root = detail::load_yaml_file(path, name, detail::config_yaml_limits);
  std::map<std::string, std::string> out;
  if (root.IsMap()) {
    flatten_yaml(root, "", name, out);
  } else if (!root.IsNull()) {
    throw UsageError(name + " is not a YAML map");
  }
  return out;
}

}  // namespace

std::string SettingDef::env_name() const {
  std::string out = "DDSTAGE_";
  for (char c : key)
    out += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::span<const SettingDef> setting_table() {
  return table;
}

std::string_view source_name(SettingSource s) {
  switch (s) {
    case SettingSource::flag:
      return "flag";
    case SettingSource::env:
      return "env";
    case SettingSource::file:
      return "file";
    case SettingSource::default_value:
      return "default";
  }
  return "?";
}

std::optional<uint64_t> parse_size(std::string_view text) {
  // "8G", "8GB", "8GiB" and "8g" alike mean 8 * 2^30, as Slurm's --mem does: people who type
  // sizes here type that one daily, and a "GB" meaning something else would waste 7%.
  const auto ends_with_ci = [&text](std::string_view suffix) {
    if (text.size() < suffix.size()) return false;
    const auto tail = text.substr(text.size() - suffix.size());
    return std::equal(tail.begin(), tail.end(), suffix.begin(),
                      [](char a, char b) { return std::tolower(a) == b; });
  };
  if (ends_with_ci("ib")) {
    text.remove_suffix(2);
    if (text.empty() || !std::isalpha(static_cast<unsigned char>(text.back())))
      return std::nullopt;  // "12iB": a binary unit needs its letter
  } else if (ends_with_ci("b")) {
    text.remove_suffix(1);
  }
  if (text.empty()) return std::nullopt;
  uint64_t mult = 1;
  switch (std::tolower(static_cast<unsigned char>(text.back()))) {
    case 'k':
      mult = 1ull << 10;
      break;
    case 'm':
      mult = 1ull << 20;
      break;
    case 'g':
      mult = 1ull << 30;
      break;
    case 't':
      mult = 1ull << 40;
      break;
    default:
      break;
  }
  if (mult != 1) text.remove_suffix(1);
  // "12.5K": a fraction is allowed when it comes to whole bytes.
  const auto dot = text.find('.');
  const auto whole = text.substr(0, dot);
  const auto fraction = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() || (dot != std::string_view::npos && fraction.empty()) || fraction.size() > 6)
    return std::nullopt;
  auto number = [](std::string_view digits, uint64_t& v) {
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    return ec == std::errc() && end == digits.data() + digits.size();
  };
  uint64_t v = 0, frac = 0, scale = 1;
  if (!number(whole, v) || (!fraction.empty() && !number(fraction, frac))) return std::nullopt;
  for (std::size_t i = 0; i < fraction.size(); ++i) scale *= 10;
  if (v > UINT64_MAX / mult || (frac * mult) % scale != 0) return std::nullopt;
  return v * mult + frac * mult / scale;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  // Longest suffix first: "ms" must not be read as minutes.
  static constexpr std::array<std::pair<std::string_view, double>, 4> units{
      {{"ms", 1.0}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}}};
  double scale = 1e3;
  for (const auto& [suffix, ms] : units) {
    if (text.ends_with(suffix)) {
      text.remove_suffix(suffix.size());
      scale = ms;
      break;
    }
  }
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !(v >= 0 && v * scale < 1e15)) {
    return std::nullopt;  // also NaN, inf and spans no clock can hold
  }
  return std::chrono::milliseconds(static_cast<int64_t>(v * scale + 0.5));
}

Settings::Settings() {
  for (const auto& d : table)
    m_values[std::string(d.key)] = {std::string(d.default_value), SettingSource::default_value};
}

Settings Settings::resolve(const std::map<std::string, std::string>& flags,
                           const std::map<std::string, std::string>& env,
                           const std::optional<std::filesystem::path>& config,
                           bool config_required) {
  Settings s;
  if (config) {
    std::error_code ec;
    s.m_config = *config;
    if (std::filesystem::exists(*config, ec)) {
      s.m_config_found = true;
      for (const auto& [key, value] : read_config(*config)) {
        const SettingDef* d = find_def(key);
        if (!d)
          throw UsageError("config file " + config->string() + ": unknown setting '" + key + "'");
        check_type(*d, value, "config file " + config->string());
        s.m_values[key] = {value, SettingSource::file};
      }
    } else if (config_required) {
      throw UsageError("config file " + config->string() + " does not exist");
    }
  }
  for (const auto& d : table) {
    auto it = env.find(d.env_name());
    if (it == env.end()) continue;
    check_type(d, it->second, "environment variable " + d.env_name());
    s.m_values[std::string(d.key)] = {it->second, SettingSource::env};
  }
  for (const auto& [key, value] : flags) {
    const SettingDef* d = find_def(key);
    if (!d) throw std::logic_error("flag mapped to unknown setting " + key);
    check_type(*d, value, "the command line");
    s.m_values[key] = {value, SettingSource::flag};
  }
  return s;
}

const Settings::Value& Settings::value(std::string_view key) const {
  auto it = m_values.find(key);
  if (it == m_values.end()) throw std::logic_error("unknown setting " + std::string(key));
  return it->second;
}

bool Settings::get_bool(std::string_view key) const {
  return *parse_bool(value(key).text);
}
int64_t Settings::get_int(std::string_view key) const {
  return *parse_int(value(key).text);
}
uint64_t Settings::get_size(std::string_view key) const {
  return *parse_size(value(key).text);
}
std::chrono::milliseconds Settings::get_duration(std::string_view key) const {
  return *parse_duration(value(key).text);
}
const std::string& Settings::get_string(std::string_view key) const {
  return value(key).text;
}
SettingSource Settings::source(std::string_view key) const {
  return value(key).source;
}

std::map<std::string, std::string> environment_settings() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    if (!kv.starts_with("DDSTAGE_")) continue;
    auto eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

namespace {

/// The XDG base-directory rule: $variable/ddstage, else ~/under_home/ddstage; empty when
/// neither variable is set.
std::filesystem::path xdg_directory(const char* variable, const char* under_home) {
  if (const char* xdg = std::getenv(variable); xdg && *xdg)
    return std::filesystem::path(xdg) / "ddstage";
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / under_home / "ddstage";
  }
  return {};
}

}  // namespace

std::filesystem::path default_config_path() {
  auto dir = xdg_directory("XDG_CONFIG_HOME", ".config");
  return dir.empty() ? dir : dir / "config.yaml";
}

std::filesystem::path default_cache_dir() {
  return xdg_directory("XDG_CACHE_HOME", ".cache");
}

}  // namespace ddstage
