// The field types beyond plain numbers (records, text, enums, complex): what manifest.yaml
// records of them survives a round trip and stays under the field table's checksum, and a
// description no reader could size safely is refused at flatten time.
#include <catch2/catch.hpp>
#include <fstream>

#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;

namespace {

FieldInfo record_field() {
  FieldInfo f{"rec", DType::structured, {2, 12}, false, 24, "/rec"};
  f.members = {
      {"a", DType::int32, 0, {}}, {"b", DType::float32, 4, {}}, {"tag", DType::bytes, 8, {4}}};
  return f;
}

FieldInfo text_field() {
  FieldInfo f{"label", DType::bytes, {5}, false, 5, "/label"};
  f.encoding = "utf-8";
  return f;
}

FieldInfo enum_field() {
  FieldInfo f{"color", DType::int8, {}, false, 1, "/color"};
  f.enum_names = {{"RED", 0}, {"GREEN", 1}, {"BLUE", -3}};
  return f;
}

fs::path write_typed_index(const test::TempDir& dir) {
  IndexWriter w({.out = dir / "t.ddx"});
  w.set_format("test");
  w.define(
      {record_field(), text_field(), enum_field(), {"z", DType::complex128, {}, false, 16, "/z"}},
      2);
  for (uint64_t i = 0; i < 2; ++i) {
    w.put_packed(i, 0, test::pattern_bytes(24, i));
    w.put_packed(i, 1, test::pattern_bytes(5, 10 + i));
    w.put_packed(i, 2, test::pattern_bytes(1, 20 + i));
    w.put_packed(i, 3, test::pattern_bytes(16, 30 + i));
  }
  w.commit();
  return dir / "t.ddx";
}

void replace_once(const fs::path& p, const std::string& from, const std::string& to) {
  auto text = test::read_text(p);
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("records, text, enums and complex fields survive a round trip", "[field_types]") {
  test::TempDir dir;
  const auto index = Index::open(write_typed_index(dir));
  const auto& rec = index.fields()[0];
  CHECK(rec.dtype == DType::structured);
  REQUIRE(rec.members.size() == 3);
  CHECK(rec.members[1].name == "b");
  CHECK(rec.members[1].dtype == DType::float32);
  CHECK(rec.members[1].offset == 4);
  CHECK(rec.members[2].shape == std::vector<uint64_t>{4});
  CHECK(index.fields()[1].encoding == "utf-8");
  REQUIRE(index.fields()[2].enum_names.size() == 3);
  CHECK(index.fields()[2].enum_names[2].name == "BLUE");
  CHECK(index.fields()[2].enum_names[2].value == -3);
  CHECK(index.fields()[3].dtype == DType::complex128);
  CHECK(dtype_size(DType::complex64) == 8);
}

TEST_CASE("an edited member, encoding or enum name is refused by the field checksum",
          "[field_types]") {
  const auto edit =
      GENERATE(std::pair<std::string, std::string>{"offset: 4", "offset: 5"},
               std::pair<std::string, std::string>{"encoding: utf-8", "encoding: ascii"},
               std::pair<std::string, std::string>{"name: GREEN", "name: GREY"});
  test::TempDir dir;
  const auto path = write_typed_index(dir);
  replace_once(path / "manifest.yaml", edit.first, edit.second);
  CHECK_THROWS_AS(Index::open(path), IndexError);
}

TEST_CASE("a field description no reader could size is refused at define", "[field_types]") {
  test::TempDir dir;
  IndexWriter w({.out = dir / "bad.ddx"});
  auto past_end = record_field();
  past_end.members[2].offset = 10;  // 4 bytes at 10 end past the 12-byte record
  CHECK_THROWS_WITH(w.define({past_end}, 1), Catch::Contains("past its 12-byte record"));
  auto nested = record_field();
  nested.members[0].dtype = DType::structured;
  CHECK_THROWS_WITH(w.define({nested}, 1), Catch::Contains("nested record"));
  auto no_members = record_field();
  no_members.members.clear();
  CHECK_THROWS_WITH(w.define({no_members}, 1), Catch::Contains("no members"));
  auto float_text = text_field();
  float_text.dtype = DType::uint8;
  CHECK_THROWS_WITH(w.define({float_text}, 1), Catch::Contains("encoding"));
  auto odd_encoding = text_field();
  odd_encoding.encoding = "latin-1";
  CHECK_THROWS_WITH(w.define({odd_encoding}, 1), Catch::Contains("encoding"));
  auto float_enum = enum_field();
  float_enum.dtype = DType::float32;
  float_enum.row_bytes = 4;
  CHECK_THROWS_WITH(w.define({float_enum}, 1), Catch::Contains("enums are integers"));
}
