// The "npy" format: .npy versions 1.0-3.0 written byte by byte, header spellings, bounded
// reading, packing, and bad input.
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

TEST_CASE("npy: unsupported dtypes are named, with the supported ones", "[npy]") {
  TempDir tmp;
  const std::string descr = GENERATE(as<std::string>{}, "'>f4'", "'<c8'", "'|S10'", "'<U3'", "'|O'",
                                     "'<f16'", "'<M8[ns]'", "[('a', '<i4'), ('b', '<f8')]");
  write_file(tmp / "x.npy", npy_bytes(1, dict(descr, "(2,)"), pattern_bytes(64, 1)));
  fs::create_directories(tmp / "out");
  auto run = [&] { flatten_to(tmp / "out/x.ddx", request_for({(tmp / "x.npy").string()})); };
  // A string descr is quoted as its contents, a structured one as written.
  const std::string shown = descr.front() == '\'' ? descr.substr(1, descr.size() - 2) : descr;
  CHECK_THROWS_AS(run(), ddstage::UsageError);
  CHECK_THROWS_WITH(run(), Contains("x.npy: unsupported dtype '" + shown + "'") &&
                               Contains("supported: ") && Contains("float32") &&
                               Contains("uint64"));
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
