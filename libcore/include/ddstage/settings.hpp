// The one settings table: every tunable with its type, default, help, env name and YAML key.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ddstage {

enum class SettingType { boolean, integer, size, string, duration };

/// One row of the settings table.
struct SettingDef {
  std::string_view key;  ///< YAML key, dotted ("flatten.pack_size")
  SettingType type;
  std::string_view default_value;
  std::string_view help;
  /// For strings with a fixed set of values: "a|b|c" (empty: any string).
  std::string_view choices = {};
  /// DDSTAGE_ + key upper-cased with '.' as '_' ("DDSTAGE_FLATTEN_PACK_SIZE").
  std::string env_name() const;
};

/// Every setting ddstage knows.
std::span<const SettingDef> setting_table();

/// Where a value came from, in precedence order: flag > env > file > default.
enum class SettingSource { flag, env, file, default_value };
std::string_view source_name(SettingSource s);

/// Resolved settings. libcore reads no environment itself: the caller passes it in.
class Settings {
 public:
  /// Built-in defaults only.
  Settings();
  /// Merges flags > env > config file > defaults. `env` holds DDSTAGE_* variables;
  /// `config` is a YAML file (missing is fine unless `config_required`). Unknown keys and
  /// badly typed values are UsageErrors naming the key and where it came from.
  static Settings resolve(const std::map<std::string, std::string>& flags,
                          const std::map<std::string, std::string>& env,
                          const std::optional<std::filesystem::path>& config, bool config_required);

  bool get_bool(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  /// Sizes accept suffixes K, M, G, T (powers of 1024).
  uint64_t get_size(std::string_view key) const;
  /// Durations: a number with unit ms, s, m or h; a plain number is seconds ("10", "500ms").
  std::chrono::milliseconds get_duration(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  SettingSource source(std::string_view key) const;
  /// Where the config file was looked for (empty when nowhere), and whether it was there.
  const std::filesystem::path& config_path() const noexcept { return m_config; }
  bool config_found() const noexcept { return m_config_found; }

 private:
  struct Value {
    std::string text;
    SettingSource source;
  };
  const Value& value(std::string_view key) const;
  std::map<std::string, Value, std::less<>> m_values;
  std::filesystem::path m_config;
  bool m_config_found = false;
};

/// The process's DDSTAGE_* variables, for Settings::resolve (libcore never reads them unasked).
std::map<std::string, std::string> environment_settings();
/// The user's config file: $XDG_CONFIG_HOME/ddstage/config.yaml, else
/// ~/.config/ddstage/config.yaml; empty when neither variable is set.
std::filesystem::path default_config_path();
/// Where ddstage keeps per-user caches (what `bench` measured per node): $XDG_CACHE_HOME/ddstage,
/// else ~/.cache/ddstage; empty when neither variable is set. With default_config_path, the one
/// place libcore reads the environment for paths.
std::filesystem::path default_cache_dir();

/// Parses sizes: a number with K, M, G or T, alone or followed by "B" or "iB", any case, every
/// one a binary multiple ("256M" = "256MB" = "256MiB" = 256 * 2^20), as Slurm's --mem reads
/// them; a bare number or "B" is bytes; fractions that come to whole bytes too ("12.5K");
/// nullopt if malformed.
std::optional<uint64_t> parse_size(std::string_view text);
/// Parses "10s" / "500ms" / "2m" / "1h" / "1.5" (seconds); nullopt if malformed or negative.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

}  // namespace ddstage
