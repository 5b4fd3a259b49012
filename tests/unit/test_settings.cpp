#include <catch2/catch.hpp>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "test_support.hpp"

using namespace ddstage;

TEST_CASE("settings precedence: flag > env > file > default", "[settings]") {
  test::TempDir dir;
  std::ofstream(dir / "c.yaml") << "threads: 3\nflatten:\n  pack_size: 1G\n  memory: 8M\n";
  auto s = Settings::resolve({{"threads", "5"}}, {{"DDSTAGE_FLATTEN_PACK_SIZE", "2M"}}, dir / "c.yaml", true);
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
  CHECK_THROWS_WITH(Settings::resolve({}, {}, dir / "c.yaml", true), Catch::Contains("unknown setting 'thread'"));
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
  CHECK(SettingDef{"flatten.pack_size", SettingType::size, "", ""}.env_name() == "DDSTAGE_FLATTEN_PACK_SIZE");
  CHECK(parse_size("256M") == 256u << 20);
  CHECK(!parse_size("12Q").has_value());
  CHECK(parse_size("12.5K") == 12800u);
  CHECK(parse_size("1.5") == std::nullopt);
  CHECK(parse_size(".5K") == std::nullopt);
  CHECK(parse_size("3.K") == std::nullopt);
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
  auto e = Settings::resolve({}, {{"DDSTAGE_FABRIC_PROVIDER", "shm"}, {"DDSTAGE_FABRIC_DOMAIN", "lo"}}, std::nullopt,
                             false);
  CHECK(e.get_string("fabric.provider") == "shm");
  CHECK(e.get_string("fabric.domain") == "lo");
}
