// The "npy" format: .npy versions 1.0-3.0 written byte by byte, header spellings, bounded
// reading, packing, and bad input.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "ddstage/formats/format.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using ddstage::test::flatten_to;
using ddstage::test::pattern_bytes;
using ddstage::test::request_for;
using ddstage::test::TempDir;
using ddstage::test::write_file;

namespace {

using Bytes = std::vector<std::byte>;

/// A .npy file: magic, version major.0, little-endian header length (2 bytes in 1.0, 4 after),
/// the dict text, then the data. With `align` the dict is padded with spaces and a newline so
/// the data starts 64-byte aligned, as numpy writes it; without, the data follows the dict.
Bytes npy_bytes(int major, const std::string& dict, const Bytes& data, bool align = true) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  if (align) {
    header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
  }
  Bytes out;
  auto put = [&out](unsigned value) { out.push_back(static_cast<std::byte>(value & 0xff)); };
  for (char c : std::string("\x93NUMPY")) put(static_cast<unsigned char>(c));
  put(static_cast<unsigned>(major));
  put(0);
  for (size_t i = 0; i < preamble - 8; ++i) put(static_cast<unsigned>(header.size() >> (8 * i)));
  for (char c : header) put(static_cast<unsigned char>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': " + descr + ", 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

/// All rows of a field in one batch (so they come back concatenated, like the .npy data), with
/// every row's checksum verified on the way.
Bytes read_field(const ddstage::Index& index, uint32_t field) {
  std::vector<uint64_t> ids(index.samples());
  std::iota(ids.begin(), ids.end(), 0);
  ddstage::OriginReader reader(index, {.verify = true});
  Bytes bytes(reader.batch_bytes(field, ids));
  reader.read(field, ids, bytes);
  return bytes;
}

}  // namespace

TEST_CASE("npy: versions 1.0, 2.0 and 3.0 are indexed in place, row by row", "[npy]") {
  TempDir tmp;
  const int major = GENERATE(1, 2, 3);
  const auto data = pattern_bytes(5 * 3 * 4, 7);
  const auto file = npy_bytes(major, dict("'<f4'", "(5, 3)"), data);
  write_file(tmp / "x.npy", file);

  flatten_to(tmp / "out.ddx", request_for({(tmp / "x.npy").string()}));
  const auto index = ddstage::Index::open(tmp / "out.ddx");
  CHECK(index.manifest().format == "npy");
  CHECK(index.samples() == 5);
  REQUIRE(index.fields().size() == 1);
  const auto& field = index.fields()[0];
  CHECK(field.name == "x");
  CHECK(field.dtype == ddstage::DType::float32);
  CHECK(field.shape == std::vector<uint64_t>{3});
  CHECK_FALSE(field.variable);
  CHECK(field.row_bytes == 12);
  CHECK(read_field(index, 0) == data);
  const uint64_t data_offset = file.size() - data.size();
  CHECK(data_offset % 64 == 0);
  for (uint64_t i = 0; i < 5; ++i) {
    CHECK(index.entry(i, 0).offset == data_offset + i * 12);
    CHECK(index.files()[index.entry(i, 0).file].kind == ddstage::FileKind::source);
  }
}

TEST_CASE("npy: several files are fields of the same samples, under any memory budget", "[npy]") {
  TempDir tmp;
  struct Source {
    std::string stem, descr, shape;
    size_t row_bytes;
  };
  const std::vector<Source> sources = {
      {"x", "'<f8'", "(7, 2, 3)", 48},
      {"y", "'|u1'", "(7,)", 1},
      {"w", "'|b1'", "(7, 4)", 4},
      {"z", "'<i8'", "(7, 0)", 0},
  };
  std::vector<Bytes> data;
  auto request = request_for({});
  for (const auto& s : sources) {
    data.push_back(pattern_bytes(7 * s.row_bytes, data.size()));
    write_file(tmp / (s.stem + ".npy"), npy_bytes(1, dict(s.descr, s.shape), data.back()));
    request.sources.push_back((tmp / (s.stem + ".npy")).string());
  }
  // 16: x's rows exceed the budget (mapped); 100: two rows of x per block, a short last block.
  request.memory_budget = GENERATE(uint64_t{1} << 20, uint64_t{100}, uint64_t{16});
  request.pack = GENERATE(false, true);
  flatten_to(tmp / "out.ddx", request);

  const auto index = ddstage::Index::open(tmp / "out.ddx");
  CHECK(index.samples() == 7);
  REQUIRE(index.fields().size() == sources.size());
  CHECK(index.fields()[0].shape == std::vector<uint64_t>{2, 3});
  CHECK(index.fields()[2].dtype == ddstage::DType::boolean);
  for (uint32_t f = 0; f < sources.size(); ++f) {
    CHECK(index.fields()[f].name == sources[f].stem);
    CHECK(index.fields()[f].row_bytes == sources[f].row_bytes);
    CHECK(read_field(index, f) == data[f]);
    const auto kind = index.files()[index.entry(0, f).file].kind;
    CHECK(kind == (request.pack ? ddstage::FileKind::pack : ddstage::FileKind::source));
  }
}

TEST_CASE("npy: the header dict is parsed as a Python literal", "[npy]") {
  TempDir tmp;
  const std::string header = GENERATE(
      std::string("{'descr': '<i2', 'fortran_order': False, 'shape': (4, 2), }"),
      std::string("{'shape':(4,2),'fortran_order':False,'descr':'<i2'}"),
      std::string("{ \"descr\" : \"=i2\" ,\n 'fortran_order' : False , 'shape' : ( 4 , 2 , ) ,"
                  " 'extra': [None, True, (1, 'a\\'b')] }"),
      std::string("{'descr': '<i2', 'fortran_order': False, 'shape': (4L, 2L)}"));
  const bool align = GENERATE(true, false);
  const auto data = pattern_bytes(16, 3);
  // Detected by its magic: the name does not end in .npy.
  write_file(tmp / "arr.bin", npy_bytes(1, header, data, align));

  flatten_to(tmp / "out.ddx", request_for({(tmp / "arr.bin").string()}));
  const auto index = ddstage::Index::open(tmp / "out.ddx");
  CHECK(index.manifest().format == "npy");
  REQUIRE(index.fields().size() == 1);
  CHECK(index.fields()[0].name == "arr");
  CHECK(index.fields()[0].dtype == ddstage::DType::int16);
  CHECK(index.fields()[0].shape == std::vector<uint64_t>{2});
  CHECK(read_field(index, 0) == data);
}

TEST_CASE("npy: a 1-D array in Fortran order is the same as in C order", "[npy]") {
  TempDir tmp;
  const auto data = pattern_bytes(8, 4);
  write_file(tmp / "v.npy", npy_bytes(3, dict("'|u1'", "(8,)", true), data));
  flatten_to(tmp / "out.ddx", request_for({(tmp / "v.npy").string()}));
  CHECK(read_field(ddstage::Index::open(tmp / "out.ddx"), 0) == data);
}

/// `bytes` with every run of `width` bytes reversed (from big- to little-endian).
Bytes swapped(Bytes bytes, size_t width) {
  for (size_t i = 0; width > 1 && i + width <= bytes.size(); i += width)
    std::reverse(bytes.begin() + i, bytes.begin() + i + width);
  return bytes;
}

TEST_CASE("npy: element types beyond plain numbers", "[npy]") {
  using ddstage::DType;
  struct Case {
    std::string descr;
    DType dtype;
    std::vector<uint64_t> item_axes;
    uint64_t item_bytes;
    std::string encoding;
    size_t swap_width;  // 0: in place, as is
    bool numpy_descr;   // kept as an attribute
  };
  const auto c = GENERATE(values<Case>({
      {"'>i4'", DType::int32, {}, 4, "", 4, false},
      {"'>f2'", DType::float16, {}, 2, "", 2, false},
      {"'>u1'", DType::uint8, {}, 1, "", 0, false},
      {"'<c8'", DType::complex64, {}, 8, "", 0, false},
      {"'>c16'", DType::complex128, {}, 16, "", 8, false},
      {"'|S10'", DType::bytes, {10}, 10, "ascii", 0, false},
      {"'|V6'", DType::bytes, {6}, 6, "", 0, false},
      {"'<U3'", DType::uint32, {3}, 12, "", 0, true},
      {"'>U3'", DType::uint32, {3}, 12, "", 4, true},
      {"'<M8[ns]'", DType::int64, {}, 8, "", 0, true},
      {"'>m8'", DType::int64, {}, 8, "", 8, true},
  }));
  TempDir tmp;
  const auto data = pattern_bytes(2 * 3 * c.item_bytes, 5);
  write_file(tmp / "x.npy", npy_bytes(1, dict(c.descr, "(2, 3)"), data));
  flatten_to(tmp / "out.ddx", request_for({(tmp / "x.npy").string()}));
  const auto index = ddstage::Index::open(tmp / "out.ddx");
  const auto& f = index.fields()[0];
  CHECK(f.dtype == c.dtype);
  auto shape = std::vector<uint64_t>{3};
  shape.insert(shape.end(), c.item_axes.begin(), c.item_axes.end());
  CHECK(f.shape == shape);
  CHECK(f.row_bytes == 3 * c.item_bytes);
  CHECK(f.encoding == c.encoding);
  CHECK(index.manifest().attributes.contains("numpy_dtype.x") == c.numpy_descr);
  CHECK(read_field(index, 0) == swapped(data, c.swap_width));
  const auto kind = index.files()[index.entry(0, 0).file].kind;
  CHECK(kind == (c.swap_width ? ddstage::FileKind::pack : ddstage::FileKind::source));
}

TEST_CASE("npy: a structured dtype becomes members at numpy's offsets", "[npy]") {
  using ddstage::DType;
  TempDir tmp;
  // An aligned record as numpy writes it: padding is unnamed voids, and (title, name) pairs.
  const std::string descr =
      "[('flag', '|u1'), ('', '|V3'), (('a title', 'x'), '>f4', (2,)), ('s', '|S5'), "
      "('c', '>c8'), ('u', '<U2', (2,)), ('', '|V3')]";
  Bytes data(2 * 44);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i % 44);
  write_file(tmp / "r.npy", npy_bytes(1, dict(descr, "(2,)"), data));
  auto request = request_for({(tmp / "r.npy").string()});
  request.memory_budget = GENERATE(uint64_t{1} << 20, uint64_t{3});
  flatten_to(tmp / "out.ddx", request);
  const auto index = ddstage::Index::open(tmp / "out.ddx");
  const auto& f = index.fields()[0];
  CHECK(f.dtype == DType::structured);
  CHECK(f.shape == std::vector<uint64_t>{44});
  REQUIRE(f.members.size() == 5);
  const auto& m = f.members;
  CHECK((m[0].name == "flag" && m[0].dtype == DType::uint8 && m[0].offset == 0));
  CHECK((m[1].name == "x" && m[1].dtype == DType::float32 && m[1].offset == 4 &&
         m[1].shape == std::vector<uint64_t>{2}));
  CHECK((m[2].name == "s" && m[2].dtype == DType::bytes && m[2].offset == 12 &&
         m[2].shape == std::vector<uint64_t>{5}));
  CHECK((m[3].name == "c" && m[3].dtype == DType::complex64 && m[3].offset == 17));
  CHECK((m[4].name == "u" && m[4].dtype == DType::uint32 && m[4].offset == 25 &&
         m[4].shape == std::vector<uint64_t>{2, 2}));
  CHECK(index.manifest().attributes.contains("numpy_dtype.r"));
  // Only the big-endian members are swapped, each float on its own; padding stays.
  const auto got = read_field(index, 0);
  REQUIRE(got.size() == data.size());
  for (size_t base : {size_t{0}, size_t{44}}) {
    CHECK(got[base + 1] == std::byte{1});    // padding
    CHECK(got[base + 4] == std::byte{7});    // x[0]: 7 6 5 4
    CHECK(got[base + 8] == std::byte{11});   // x[1]: 11 10 9 8
    CHECK(got[base + 12] == std::byte{12});  // text untouched
    CHECK(got[base + 17] == std::byte{20});  // c: 20 19 18 17, then 24 23 22 21
    CHECK(got[base + 21] == std::byte{24});
    CHECK(got[base + 25] == std::byte{25});  // little-endian U untouched
  }
}

TEST_CASE("npy: unsupported and unindexable dtypes name the file, member and reason", "[npy]") {
  TempDir tmp;
  struct Case {
    std::string descr, words;
  };
  const auto c = GENERATE(values<Case>({
      {"'<f16'", "x.npy: unsupported dtype '<f16' (supported: "},
      {"'>c32'", "x.npy: unsupported dtype '>c32'"},
      {"'|O'", "x.npy: unsupported dtype '|O' (pickled Python objects"},
      {"'|S0'", "zero-length"},
      {"[('a', '<i4'), ('b', '|O')]", "x.npy: member 'b' has unsupported dtype '|O' (pickled"},
      {"[('a', [('b', '<i4')])]", "x.npy: member 'a' is itself a record"},
      {"[('', '|V4')]", "has no members"},
      {"[('a', '<i4', (0,))]", "has no members with bytes"},
      {"[('a', '<i4'), ('a', '<i4')]", "repeated member name"},
      {"5", "x.npy: unsupported dtype '5' (not a type string)"},
  }));
  write_file(tmp / "x.npy", npy_bytes(1, dict(c.descr, "(2,)"), pattern_bytes(64, 1)));
  fs::create_directories(tmp / "out");
  auto run = [&] { flatten_to(tmp / "out/x.ddx", request_for({(tmp / "x.npy").string()})); };
  CHECK_THROWS_AS(run(), ddstage::UsageError);
  CHECK_THROWS_WITH(run(), Contains(c.words));
  CHECK(fs::is_empty(tmp / "out"));
}

TEST_CASE("npy: bad input is a clear error and leaves no index behind", "[npy]") {
  TempDir tmp;
  const auto x = (tmp / "x.npy").string();
  const auto out_dir = tmp / "out";
  fs::create_directories(out_dir);
  auto request = request_for({x});
  auto run = [&] { flatten_to(out_dir / "x.ddx", request); };

  SECTION("Fortran order with two dimensions") {
    write_file(x, npy_bytes(1, dict("'<f4'", "(2, 3)", true), pattern_bytes(24, 1)));
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("x.npy") && Contains("Fortran order"));
  }
  SECTION("a scalar") {
    write_file(x, npy_bytes(1, dict("'<f4'", "()"), pattern_bytes(4, 1)));
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("x.npy") && Contains("scalar"));
  }
  SECTION("a truncated file") {
    const auto file = npy_bytes(2, dict("'<f4'", "(5, 3)"), pattern_bytes(50, 1));
    write_file(x, file);
    const auto offset = file.size() - 50;
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains(x + " is truncated: expected " + std::to_string(offset + 60) +
                                      " bytes, found " + std::to_string(offset + 50)));
  }
  SECTION("a bad magic") {
    auto file = npy_bytes(1, dict("'<f4'", "(2,)"), pattern_bytes(8, 1));
    file[5] = std::byte{'Z'};
    write_file(x, file);
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains(x + " is not a valid .npy file") && Contains("magic"));
  }
  SECTION("an unknown version") {
    auto file = npy_bytes(2, dict("'<f4'", "(2,)"), pattern_bytes(8, 1));
    file[6] = std::byte{4};
    write_file(x, file);
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("is not a valid .npy file") && Contains("version 4.0"));
  }
  SECTION("a header longer than the file") {
    auto file = npy_bytes(1, dict("'<f4'", "(2,)"), {});
    file[8] = std::byte{0xff};
    file[9] = std::byte{0x7f};
    write_file(x, file);
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(),
                      Contains("is not a valid .npy file") && Contains("ends inside the header"));
  }
  SECTION("a header length too short for a dict") {
    // Version 1.0: the header would end inside the 12 bytes read to learn its length.
    const int length = GENERATE(0, 1);
    auto file = npy_bytes(1, "", pattern_bytes(40, 1), false);
    file[8] = static_cast<std::byte>(length);
    write_file(x, file);
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains(x + " is not a valid .npy file: header length " +
                                      std::to_string(length) + " is too short"));
  }
  SECTION("an unparseable header") {
    const auto header =
        GENERATE(as<std::string>{}, "{'descr': '<f4', 'fortran_order': False}",
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
                 "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}",
                 "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}",
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk",
                 "{'descr': '<f4', 'fortran_order': False, 'shape': ((((((((((((((((("
                 "(((((((((((((((((((3,)))))))))))))))))))))))))))))))))))}",
                 "['descr', '<f4']");
    write_file(x, npy_bytes(1, header, pattern_bytes(12, 1)));
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains(x + " is not a valid .npy file: "));
  }
  SECTION("files with different row counts") {
    write_file(x, npy_bytes(1, dict("'<f4'", "(5,)"), pattern_bytes(20, 1)));
    write_file(tmp / "y.npy", npy_bytes(1, dict("'<f4'", "(4,)"), pattern_bytes(16, 2)));
    request.sources.push_back((tmp / "y.npy").string());
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("x.npy has 5 rows") && Contains("y.npy has 4"));
  }
  SECTION("two files with the same stem") {
    const auto file = npy_bytes(1, dict("'<f4'", "(5,)"), pattern_bytes(20, 1));
    write_file(tmp / "a/x.npy", file);
    write_file(tmp / "b/x.npy", file);
    request.sources = {(tmp / "a/x.npy").string(), (tmp / "b/x.npy").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("a/x.npy") && Contains("b/x.npy") && Contains("field 'x'"));
  }
  SECTION("a missing file") {
    request.sources = {(tmp / "gone.npy").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("gone.npy does not exist"));
  }
  CHECK(fs::is_empty(out_dir));
}
