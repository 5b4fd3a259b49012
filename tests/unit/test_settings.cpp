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
}
