#include <catch2/catch.hpp>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "test_support.hpp"

using namespace ddstage;

TEST_CASE("settings precedence: flag > env > file > default", "[settings]") {
  test::TempDir dir;
  std::ofstream(dir / "c.yaml") << "threads: 3\nflatten:\n  pack_size: 1G\n  memory: 8M\n";
  auto s = Settings::resolve({{"threads", "5"}}, {{"DDSTAGE_FLATTEN_PACK_SIZE", "2M"}},
                             dir / "c.yaml", true);
  CHECK(s.get_int("threads") == 5);
  CHECK(s.source("threads") == SettingSource::flag);
  CHECK(s.get_size("flatten.pack_size") == 2u << 20);
  CHECK(s.source("flatten.pack_size") == SettingSource::env);
  CHECK(s.get_size("flatten.memory") == 8u << 20);
  CHECK(s.source("flatten.memory") == SettingSource::file);
  CHECK(s.get_bool("origin.allow_stale") == false);
  CHECK(s.source("origin.allow_stale") == SettingSource::default_value);
}

TEST_CASE("bad settings name the setting and where they came from", "[settings]") {
  test::TempDir dir;
  std::ofstream(dir / "c.yaml") << "thread: 3\n";
  CHECK_THROWS_WITH(Settings::resolve({}, {}, dir / "c.yaml", true),
                    Catch::Contains("unknown setting 'thread'"));
  CHECK_THROWS_WITH(Settings::resolve({}, {{"DDSTAGE_THREADS", "many"}}, std::nullopt, false),
                    Catch::Contains("DDSTAGE_THREADS"));
  CHECK_THROWS_AS(Settings::resolve({}, {}, dir / "missing.yaml", true), UsageError);
  CHECK_NOTHROW(Settings::resolve({}, {}, dir / "missing.yaml", false));
}

TEST_CASE("every setting has an env name and a valid default", "[settings]") {
  Settings s;
  for (const auto& d : setting_table()) {
    CHECK(d.env_name().starts_with("DDSTAGE_"));
    CHECK(!d.help.empty());
  }
  CHECK(SettingDef{"flatten.pack_size", SettingType::size, "", ""}.env_name() ==
        "DDSTAGE_FLATTEN_PACK_SIZE");
  CHECK(parse_size("256M") == 256u << 20);
  CHECK(!parse_size("12Q").has_value());
  CHECK(parse_size("12.5K") == 12800u);
  CHECK(parse_size("1.5") == std::nullopt);
  CHECK(parse_size(".5K") == std::nullopt);
  CHECK(parse_size("3.K") == std::nullopt);
  // One convention, Slurm's: K/M/G/T with or without B or iB, any case, all binary.
  for (const char* g : {"8G", "8g", "8GB", "8gb", "8GiB", "8gib"})
    CHECK(parse_size(g) == 8ull << 30);
  CHECK(parse_size("1.5KiB") == 1536u);
  CHECK(parse_size("4096B") == 4096u);
  CHECK(parse_size("12iB") == std::nullopt);
  CHECK(parse_size("MiB") == std::nullopt);
  CHECK(parse_size("B") == std::nullopt);
}

TEST_CASE("durations take ms, s, m, h; a plain number is seconds", "[settings]") {
  using std::chrono::milliseconds;
  CHECK(parse_duration("10s") == milliseconds(10000));
  CHECK(parse_duration("500ms") == milliseconds(500));
  CHECK(parse_duration("2m") == milliseconds(120000));
  CHECK(parse_duration("1h") == milliseconds(3600000));
  CHECK(parse_duration("3") == milliseconds(3000));
  CHECK(parse_duration("1.5") == milliseconds(1500));
  CHECK(parse_duration("0") == milliseconds(0));
  for (const char* bad : {"", "s", "ms", "-1s", "10 s", "10x", "inf", "nan", "1e300s"}) {
    INFO(bad);
    CHECK(!parse_duration(bad).has_value());
  }
  CHECK(Settings().get_duration("read_timeout") == milliseconds(10000));
  auto s = Settings::resolve({}, {{"DDSTAGE_READ_TIMEOUT", "750ms"}}, std::nullopt, false);
  CHECK(s.get_duration("read_timeout") == milliseconds(750));
  CHECK_THROWS_WITH(Settings::resolve({}, {{"DDSTAGE_READ_TIMEOUT", "soon"}}, std::nullopt, false),
                    Catch::Contains("DDSTAGE_READ_TIMEOUT"));
}

TEST_CASE("fabric settings have their defaults and env names", "[settings]") {
  Settings s;
  CHECK(s.get_string("fabric.provider") == "auto");
  CHECK(s.get_string("fabric.domain").empty());
  CHECK(s.get_int("fabric.window") == 128);
  CHECK(s.get_size("fabric.inflight_bytes") == 4u << 20);
  auto e =
      Settings::resolve({}, {{"DDSTAGE_FABRIC_PROVIDER", "shm"}, {"DDSTAGE_FABRIC_DOMAIN", "lo"}},
                        std::nullopt, false);
  CHECK(e.get_string("fabric.provider") == "shm");
  CHECK(e.get_string("fabric.domain") == "lo");
}

TEST_CASE("fabric.progress takes adaptive, sleep or spin; fabric.spin a duration", "[settings]") {
  Settings s;
  CHECK(s.get_string("fabric.progress") == "adaptive");
  CHECK(s.get_duration("fabric.spin") == std::chrono::milliseconds(1));
  for (const char* mode : {"adaptive", "sleep", "spin"}) {
    auto e = Settings::resolve({}, {{"DDSTAGE_FABRIC_PROGRESS", mode}}, std::nullopt, false);
    CHECK(e.get_string("fabric.progress") == mode);
  }
  auto f = Settings::resolve({{"fabric.spin", "250ms"}}, {}, std::nullopt, false);
  CHECK(f.get_duration("fabric.spin") == std::chrono::milliseconds(250));
  for (const auto& [key, bad] : {std::pair{"fabric.progress", "busy"},
                                 {"fabric.progress", ""},
                                 {"fabric.spin", "soon"},
                                 {"fabric.spin", "-1ms"}}) {
    INFO(key << "=" << bad);
    try {
      Settings::resolve({{key, bad}}, {}, std::nullopt, false);
      FAIL("accepted");
    } catch (const UsageError& e) {
      const std::string what = e.what();
      CHECK(what.find(key) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  CHECK_THROWS_WITH(
      Settings::resolve({}, {{"DDSTAGE_FABRIC_PROGRESS", "poll"}}, std::nullopt, false),
      Catch::Contains("fabric.progress") && Catch::Contains("adaptive|sleep|spin"));
}

namespace {

/// The one-line UsageError Settings::resolve gives for config text: it must name the file.
std::string config_error(const test::TempDir& dir, const std::string& text) {
  std::ofstream(dir / "c.yaml") << text;
  try {
    Settings::resolve({}, {}, dir / "c.yaml", true);
  } catch (const UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find("config file " + (dir / "c.yaml").string()) != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
    return what;
  }
  FAIL("config accepted: " << text.substr(0, 80));
  return {};
}

}  // namespace

TEST_CASE("config files are parsed within limits: no aliases, bounded depth, size and values",
          "[settings][yaml]") {
  test::TempDir dir;
  // A self-referencing alias made yaml-cpp recurse until the stack overflowed.
  CHECK_THAT(config_error(dir, "a: &a\n  b: *a\n"),
             Catch::Contains("aliases are not allowed") && Catch::Contains("line 2"));
  CHECK_THAT(config_error(dir, "a: &a [*a]\n"), Catch::Contains("aliases are not allowed"));
  CHECK_THAT(config_error(dir, "base: &b {threads: 2}\nother: *b\n"),
             Catch::Contains("aliases are not allowed"));
  // A billion-laughs expansion is refused at its first alias, long before it expands.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    laughs += std::string(1, c) + ": &" + c + " [*" + static_cast<char>(c - 1) + ", *" +
              static_cast<char>(c - 1) + "]\n";
  }
  CHECK_THAT(config_error(dir, laughs),
             Catch::Contains("aliases are not allowed") && Catch::Contains("line 2"));
  CHECK_THAT(config_error(dir, std::string(100'000, '[') + std::string(100'000, ']')),
             Catch::Contains("nested deeper than 16 levels"));
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += std::string(2 * i, ' ') + "k:\n";
  CHECK_THAT(config_error(dir, deep), Catch::Contains("nested deeper than 16 levels"));
  std::string wide = "threads: [0";
  for (int i = 0; i < 10'000; ++i) wide += ",0";
  CHECK_THAT(config_error(dir, wide + "]\n"), Catch::Contains("more than 10000 YAML values"));
  CHECK_THAT(config_error(dir, "# " + std::string(std::size_t{1} << 20, 'x') + "\n"),
             Catch::Contains("larger than the 1 MiB allowed"));
  CHECK_THAT(config_error(dir, "{threads: 2}: 3\n"), Catch::Contains("is not a plain name"));
  CHECK_THAT(config_error(dir, "flatten: [1, 2]\n"),
             Catch::Contains("setting flatten must be a single value"));
  CHECK_THAT(config_error(dir, "threads: [1\n"), Catch::Contains("is not valid YAML"));
  // Anchors alone are harmless, and a config at the limits still loads.
  std::ofstream(dir / "ok.yaml") << "threads: &t 3\nflatten:\n  pack_size: 1G\n";
  CHECK(Settings::resolve({}, {}, dir / "ok.yaml", true).get_int("threads") == 3);
}

TEST_CASE("a config file that never ends is read only up to the limit", "[settings][yaml]") {
  CHECK_THROWS_WITH(
      Settings::resolve({}, {}, "/dev/zero", true),
      Catch::Contains("config file /dev/zero") && Catch::Contains("larger than the 1 MiB allowed"));
  test::TempDir dir;
  CHECK_THROWS_MATCHES(
      Settings::resolve({}, {}, dir.path(), true), UsageError,
      Catch::Message("config file " + dir.path().string() + " is a directory, not a YAML file"));
}
