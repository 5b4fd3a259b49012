#include <catch2/catch.hpp>

#include <string>

#include "ddstage/error.hpp"

using ddstage::UsageError;

TEST_CASE("an error is one line whatever the bytes it quotes", "[error]") {
  // Found by fuzz_config and fuzz_store_yaml: yaml-cpp quotes the bad escape character of
  // "\<newline>" raw, and settings quote bad values raw, so the message spanned two lines.
  const UsageError e("bad value 'a\nb\r\x1b[2J\x7f' in caf\xc3\xa9.yaml",
                     {.file = "x\n.yaml", .sample = 3});
  const std::string what = e.what();
  CHECK(what == "bad value 'a?b??[2J?' in caf\xc3\xa9.yaml (file x?.yaml, sample 3)");
  CHECK(e.message() == "bad value 'a?b??[2J?' in caf\xc3\xa9.yaml");
}
