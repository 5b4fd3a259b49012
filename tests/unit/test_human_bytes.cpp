#include <catch2/catch.hpp>

#include "ddstage/tool/human_bytes.hpp"

using ddstage::human_bytes;

TEST_CASE("sizes for people are binary, the unit chosen after rounding", "[human_bytes]") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1023.6) == "1.0 KiB");
  CHECK(human_bytes(1024) == "1.0 KiB");
  CHECK(human_bytes(1536) == "1.5 KiB");
  CHECK(human_bytes(1048575) == "1.0 MiB");  // not "1024.0 KiB"
  CHECK(human_bytes(1048576) == "1.0 MiB");
  CHECK(human_bytes(1073741824.0 * 3) == "3.0 GiB");
  CHECK(human_bytes(1099511627776.0 * 2048) == "2048.0 TiB");  // no unit past TiB
}
