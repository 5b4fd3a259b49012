// The HDF5 source format: files written here with the HDF5 C API are flattened, and every
// sample read back through the index must equal H5Dread of the same data, byte for byte.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <initializer_list>

#include "ddstage/error.hpp"
#include "ddstage/formats/format.hpp"
#include "ddstage/formats/hdf5_sample_reader.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

namespace {

/// Closes an HDF5 identifier at scope exit.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : m_id(id), m_close(close) { REQUIRE(id >= 0); }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { m_close(m_id); }
  operator hid_t() const { return m_id; }

 private:
  hid_t m_id;
  herr_t (*m_close)(hid_t);
};

/// How a test dataset is stored.
struct Storage {
  hsize_t chunk_rows = 0;  // 0: contiguous
  bool deflate = false;
  bool compact = false;
  bool unwritten = false;             // created, never written: fill values, no storage allocated
  hid_t file_type = H5I_INVALID_HID;  // default: the memory type
};

Id create_file(const fs::path& path, hsize_t userblock = 0) {
  Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (userblock > 0) REQUIRE(H5Pset_userblock(fcpl, userblock) >= 0);
  return Id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT), H5Fclose);
}

void write_dataset(hid_t loc, const std::string& path, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* data,
                   const Storage& storage = {}) {
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  REQUIRE(H5Pset_create_intermediate_group(lcpl, 1) >= 0);
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (storage.chunk_rows > 0 || storage.deflate) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = std::max<hsize_t>(storage.chunk_rows, 1);
    REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
    if (storage.deflate) REQUIRE(H5Pset_deflate(dcpl, 4) >= 0);
  }
  if (storage.compact) REQUIRE(H5Pset_layout(dcpl, H5D_COMPACT) >= 0);
  Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                        : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  hid_t file_type = storage.file_type >= 0 ? storage.file_type : mem_type;
  Id dset(H5Dcreate2(loc, path.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT), H5Dclose);
  if (!storage.unwritten)
    REQUIRE(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
}

/// Little-endian bytes of a whole dataset as H5Dread returns them: what the index must hold.
Bytes read_back(const fs::path& file, const std::string& path, hid_t mem_type) {
  Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  Id d(H5Dopen2(f, path.c_str(), H5P_DEFAULT), H5Dclose);
  Id s(H5Dget_space(d), H5Sclose);
  Bytes out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)) * H5Tget_size(mem_type));
  if (!out.empty()) REQUIRE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
  return out;
}

haddr_t dataset_offset(const fs::path& file, const std::string& path) {
  Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  Id d(H5Dopen2(f, path.c_str(), H5P_DEFAULT), H5Dclose);
  return H5Dget_offset(d);
}

/// Reads (sample, field) through the index, checking the entry's checksum on the way.
Bytes read_entry(OriginReader& reader, const Index& index, uint64_t sample, uint32_t field) {
  Bytes out(index.entry(sample, field).length);
  REQUIRE(reader.read_and_check(sample, field, out));
  return out;
}

Bytes slice(const Bytes& all, uint64_t begin, uint64_t bytes) {
  return {all.begin() + static_cast<std::ptrdiff_t>(begin),
          all.begin() + static_cast<std::ptrdiff_t>(begin + bytes)};
}

/// Every row of a fixed field equals the matching slice of `expected`.
void check_rows(const Index& index, uint32_t field, const Bytes& expected,
                uint64_t first_sample = 0) {
  OriginReader reader(index);
  const uint64_t row_bytes = index.fields()[field].row_bytes;
  REQUIRE(row_bytes > 0);
  const uint64_t rows = expected.size() / row_bytes;
  for (uint64_t i = 0; i < rows; ++i) {
    INFO("sample " << first_sample + i << " field " << index.fields()[field].name);
    CHECK(read_entry(reader, index, first_sample + i, field) ==
          slice(expected, i * row_bytes, row_bytes));
  }
}

/// Reading every entry through Hdf5SampleReader gives the index's bytes.
void check_sample_reader(const Index& index) {
  formats::Hdf5SampleReader baseline(index);
  OriginReader reader(index);
  for (uint64_t s = 0; s < index.samples(); ++s) {
    for (uint32_t f = 0; f < index.fields().size(); ++f) {
      Bytes expected = read_entry(reader, index, s, f);
      Bytes got(expected.size() + 16);
      INFO("sample " << s << " field " << f);
      REQUIRE(baseline.read(s, f, got) == expected.size());
      got.resize(expected.size());
      CHECK(got == expected);
    }
  }
}

bool in_place(const Index& index, uint64_t sample, uint32_t field) {
  return index.files()[index.entry(sample, field).file].kind == FileKind::source;
}

std::string attribute(const Index& index, const std::string& key) {
  auto it = index.manifest().attributes.find(key);
  return it == index.manifest().attributes.end() ? "" : it->second;
}

/// A flatten that must fail with a one-line UsageError containing every word, leaving no index.
void expect_usage_error(const test::TempDir& dir, const formats::FlattenRequest& request,
                        std::initializer_list<std::string> words) {
  const auto out = dir / "bad.ddx";
  try {
    IndexWriter writer({.out = out});
    formats::flatten(request, writer);
    writer.commit();
    FAIL("flatten succeeded");
  } catch (const UsageError& e) {
    const std::string what = e.what();
    INFO(what);
    for (const auto& w : words) CHECK(what.find(w) != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    CHECK(entry.path().filename().string().find("bad.ddx") == std::string::npos);
  }
}

/// An h5py boolean: an int8 enum with FALSE = 0 and TRUE = 1.
hid_t h5py_bool_type() {
  hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  int8_t no = 0, yes = 1;
  H5Tenum_insert(t, "FALSE", &no);
  H5Tenum_insert(t, "TRUE", &yes);
  return t;
}

/// IEEE binary16, which HDF5 1.10 has no predefined type for.
hid_t half_type() {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_precision(t, 16);
  H5Tset_ebias(t, 15);
  return t;
}

/// CSR graphs: /x float32 [nodes, 4], /x_ptr int32, /y int64 [graphs]; graph 2 is empty.
struct Graphs {
  std::vector<int32_t> ptr{0, 3, 7, 7, 12, 20, 21};
  uint64_t graphs() const { return ptr.size() - 1; }
};

void write_graphs(const fs::path& path, const Graphs& g, const Storage& storage) {
  auto file = create_file(path);
  auto x = test::pattern_bytes(static_cast<std::size_t>(g.ptr.back()) * 16, 21);
  auto y = test::pattern_bytes(g.graphs() * 8, 22);
  write_dataset(file, "/x", H5T_NATIVE_UINT32, {static_cast<hsize_t>(g.ptr.back()), 4}, x.data(),
                storage);
  write_dataset(file, "/graph/x_ptr", H5T_NATIVE_INT32, {g.ptr.size()}, g.ptr.data());
  write_dataset(file, "/y", H5T_NATIVE_INT64, {g.graphs()}, y.data());
}

/// /samples/NAME groups with x (uint8, length varies) and y (int64 scalar), created out of
/// name order; every third x is chunked, so in-place and packed entries mix.
void write_groups(const fs::path& path, const std::vector<std::string>& names,
                  const std::string& parent = "/samples") {
  auto file = create_file(path);
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto group = parent + "/" + names[k];
    auto x = test::pattern_bytes(10 + (names[k].back() % 7) * 5, names[k].back());
    int64_t y = 1000 + names[k].back();
    Storage s;
    if (k % 3 == 0) s.chunk_rows = 4;
    write_dataset(file, group + "/x", H5T_NATIVE_UINT8, {x.size()}, x.data(), s);
    write_dataset(file, group + "/y", H5T_NATIVE_INT64, {}, &y);
  }
}

}  // namespace

TEST_CASE("hdf5 rows: contiguous datasets are indexed in place", "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "train.h5";
  auto features = test::pattern_bytes(50 * 12 * 4, 1);
  auto labels = test::pattern_bytes(50 * 8, 2);
  {
    auto file = create_file(src);
    write_dataset(file, "/features", H5T_NATIVE_FLOAT, {50, 3, 4}, features.data());
    write_dataset(file, "/meta/labels", H5T_NATIVE_INT64, {50}, labels.data());
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/features"}, {"y", "meta/labels"}};
  request.memory_budget = 1024;  // many blocks

  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.samples() == 50);
  REQUIRE(index.fields().size() == 2);
  const auto& f0 = index.fields()[0];
  CHECK(f0.name == "features");
  CHECK(f0.dtype == DType::float32);
  CHECK(f0.shape == std::vector<uint64_t>{3, 4});
  CHECK(f0.row_bytes == 48);
  CHECK_FALSE(f0.variable);
  CHECK(f0.source == "/features");
  CHECK(index.fields()[1].name == "y");
  CHECK(index.fields()[1].dtype == DType::int64);
  CHECK(index.fields()[1].source == "/meta/labels");
  CHECK(index.manifest().format == "hdf5");
  CHECK(attribute(index, "mode") == "rows");
  CHECK(attribute(index, "source_starts") == "0");

  const auto base = dataset_offset(src, "/features");
  for (uint64_t i = 0; i < 50; ++i) {
    REQUIRE(in_place(index, i, 0));
    CHECK(index.entry(i, 0).offset == base + i * 48);
  }
  check_rows(index, 0, features);
  check_rows(index, 1, labels);
  check_sample_reader(index);
}

TEST_CASE("hdf5 rows: chunked, compressed, compact, big-endian and unwritten data are decoded",
          "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "d.h5";
  auto values = test::pattern_bytes(40 * 3 * 4, 3);
  Storage storage;
  std::string layout =
      GENERATE("chunked", "deflate", "compact", "big-endian", "unwritten", "packed");
  if (layout == "chunked") storage.chunk_rows = 7;
  if (layout == "deflate") storage = {.chunk_rows = 5, .deflate = true};
  if (layout == "compact") storage.compact = true;
  if (layout == "big-endian") storage.file_type = H5T_STD_I32BE;
  if (layout == "unwritten") storage.unwritten = true;
  INFO(layout);
  {
    auto file = create_file(src);
    write_dataset(file, "/v", H5T_NATIVE_INT32, {40, 3}, values.data(), storage);
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/v"}};
  request.memory_budget = 200;  // a few rows: forces many chunk-aligned blocks
  request.pack = layout == "packed";

  auto index = test::flatten_to(dir / "out.ddx", request);
  CHECK(index.fields()[0].dtype == DType::int32);
  for (uint64_t i = 0; i < 40; ++i) CHECK_FALSE(in_place(index, i, 0));
  check_rows(index, 0, read_back(src, "/v", H5T_STD_I32LE));
  check_sample_reader(index);
}

TEST_CASE("hdf5 rows: booleans, float16 and a userblock", "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "types.h5";
  std::vector<int8_t> flags(30);
  for (std::size_t i = 0; i < flags.size(); ++i) flags[i] = static_cast<int8_t>(i % 3 == 0);
  auto halves = test::pattern_bytes(30 * 2 * 2, 4);
  {
    auto file = create_file(src, 512);
    Id bool_type(h5py_bool_type(), H5Tclose);
    Id half(half_type(), H5Tclose);
    write_dataset(file, "/flag", bool_type, {30}, flags.data());
    write_dataset(file, "/h", half, {30, 2}, halves.data());
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/flag"}, {"", "/h"}};
  auto index = test::flatten_to(dir / "out.ddx", request);
  CHECK(index.fields()[0].dtype == DType::boolean);
  CHECK(index.fields()[1].dtype == DType::float16);
  CHECK(in_place(index, 0, 1));
  check_rows(index, 0,
             Bytes(reinterpret_cast<std::byte*>(flags.data()),
                   reinterpret_cast<std::byte*>(flags.data()) + flags.size()));
  check_rows(index, 1, halves);
}

TEST_CASE("hdf5 rows: a uint64 enum value beyond int64 is refused, not wrapped", "[hdf5]") {
  // The index keeps enum values as int64 (h5py cannot write such an enum; the C API can).
  test::TempDir dir;
  const auto src = dir / "enum.h5";
  {
    auto file = create_file(src);
    Id type(H5Tenum_create(H5T_NATIVE_UINT64), H5Tclose);
    for (const uint64_t value : {uint64_t{1}, (uint64_t{1} << 63) + 5}) {
      REQUIRE(H5Tenum_insert(type, value == 1 ? "LOW" : "HIGH", &value) >= 0);
    }
    const std::vector<uint64_t> rows{1, 1};
    write_dataset(file, "/e", type, {rows.size()}, rows.data());
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/e"}};
  expect_usage_error(dir, request, {"/e", "enum.h5", "'HIGH'", "9223372036854775813", "int64"});
}

TEST_CASE("hdf5 rows: VAX floats are converted to IEEE, not relabelled", "[hdf5]") {
  // VAX has IEEE's bit layout but another exponent bias and byte order: its bytes read as
  // IEEE were off by a factor of 4. h5py cannot write it; the C API can. h5py's rule picks the
  // numpy float that holds its exponent range: float64 for VAX F, long double (refused) for
  // VAX D, whose smallest exponent float64 lacks.
  test::TempDir dir;
  const auto src = dir / "vax.h5";
  const std::vector<double> values{1.5, -2.0, 3e10, 0.1, -7.25e-3, 0.0};
  const bool chunked = GENERATE(false, true);
  {
    auto file = create_file(src);
    write_dataset(file, "/v", H5T_NATIVE_DOUBLE, {values.size()}, values.data(),
                  {.file_type = H5T_VAX_F64});
    write_dataset(file, "/f", H5T_NATIVE_DOUBLE, {values.size()}, values.data(),
                  {.chunk_rows = chunked ? 4u : 0u, .file_type = H5T_VAX_F32});
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/f"}};
  auto index = test::flatten_to(dir / "out.ddx", request);
  CHECK(index.fields()[0].dtype == DType::float64);
  CHECK_FALSE(in_place(index, 0, 0));
  check_rows(index, 0, read_back(src, "/f", H5T_NATIVE_DOUBLE));
  check_sample_reader(index);
  request.fields = {{"", "/v"}};
  expect_usage_error(dir, request, {"/v", "vax.h5", "(VAX)", "52-bit mantissa", "long double"});
}

/// A record as h5py writes one: packed members {id int32, score float64, tag "S4"}.
#pragma pack(push, 1)
struct Record {
  int32_t id;
  double score;
  char tag[4];
};
#pragma pack(pop)

hid_t record_type(hid_t int_type, hid_t float_type) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(Record));
  hid_t tag = H5Tcopy(H5T_C_S1);
  H5Tset_size(tag, 4);
  H5Tset_strpad(tag, H5T_STR_NULLPAD);
  H5Tinsert(t, "id", offsetof(Record, id), int_type);
  H5Tinsert(t, "score", offsetof(Record, score), float_type);
  H5Tinsert(t, "tag", offsetof(Record, tag), tag);
  H5Tclose(tag);
  return t;
}

Bytes text_bytes(const char* s) {
  return {reinterpret_cast<const std::byte*>(s), reinterpret_cast<const std::byte*>(s) + strlen(s)};
}

TEST_CASE("hdf5 rows: records, members and variable-length strings, also through the baseline",
          "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "records.h5";
  std::vector<Record> records(9);
  for (int i = 0; i < 9; ++i) records[i] = {i * 7 - 20, i * 0.25, {'t', char('0' + i), 0, 0}};
  const std::vector<const char*> names{"", "a", "cat", "h\xc3\xa9llo", "x", "yy", "", "z", "end"};
  const bool big_endian = GENERATE(false, true);
  {
    auto file = create_file(src);
    Id memory(record_type(H5T_NATIVE_INT32, H5T_NATIVE_DOUBLE), H5Tclose);
    Id stored(record_type(big_endian ? H5T_STD_I32BE : H5T_STD_I32LE,
                          big_endian ? H5T_IEEE_F64BE : H5T_IEEE_F64LE),
              H5Tclose);
    write_dataset(file, "/rec", memory, {9}, records.data(), {.file_type = stored});
    Id text(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(text, H5T_VARIABLE);
    H5Tset_cset(text, H5T_CSET_UTF8);
    write_dataset(file, "/names", text, {9}, names.data(), {.chunk_rows = 4, .deflate = true});
  }
  auto request = test::request_for({src});
  request.fields = {{"", "/rec"}, {"id", "/rec.id"}, {"tag", "/rec.tag"}, {"", "/names"}};
  auto index = test::flatten_to(dir / "out.ddx", request);
  const auto& rec = index.fields()[0];
  CHECK(rec.dtype == DType::structured);
  CHECK(rec.shape == std::vector<uint64_t>{sizeof(Record)});
  REQUIRE(rec.members.size() == 3);
  CHECK(rec.members[1].name == "score");
  CHECK(rec.members[1].offset == 4);
  CHECK(rec.members[2].shape == std::vector<uint64_t>{4});
  CHECK(index.fields()[1].dtype == DType::int32);
  CHECK(index.fields()[2].encoding == "ascii");
  CHECK(index.fields()[3].variable);
  CHECK(index.fields()[3].encoding == "utf-8");
  // Little-endian records stay in place, their members at a stride; big-endian ones convert.
  CHECK(in_place(index, 5, 0) == !big_endian);
  CHECK(in_place(index, 5, 1) == !big_endian);
  if (!big_endian) CHECK(index.entry(5, 1).offset == index.entry(5, 0).offset);

  Bytes all(reinterpret_cast<std::byte*>(records.data()),
            reinterpret_cast<std::byte*>(records.data() + records.size()));
  check_rows(index, 0, all);
  OriginReader reader(index);
  for (uint64_t i = 0; i < 9; ++i) {
    INFO("row " << i);
    CHECK(read_entry(reader, index, i, 1) == slice(all, i * sizeof(Record), 4));
    CHECK(read_entry(reader, index, i, 2) == slice(all, i * sizeof(Record) + 12, 4));
    CHECK(read_entry(reader, index, i, 3) == text_bytes(names[i]));
  }
  check_sample_reader(index);
}

TEST_CASE("hdf5 groups: a record and a variable-length string per group", "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "g.h5";
  const std::vector<const char*> captions{"a dog", "", "two cats on a mat"};
  {
    auto file = create_file(src);
    Id memory(record_type(H5T_NATIVE_INT32, H5T_NATIVE_DOUBLE), H5Tclose);
    Id text(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(text, H5T_VARIABLE);
    for (int g = 0; g < 3; ++g) {
      const auto group = "/s/" + std::to_string(g);
      Record r{g, g * 1.5, {'g', 0, 0, 0}};
      write_dataset(file, group + "/meta", memory, {}, &r);
      write_dataset(file, group + "/caption", text, {}, &captions[g]);
    }
  }
  auto request = test::request_for({src});
  request.groups = "/s/*";
  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.fields().size() == 2);
  CHECK(index.fields()[0].name == "caption");
  CHECK(index.fields()[0].variable);
  CHECK(index.fields()[0].encoding == "ascii");
  CHECK(index.fields()[1].dtype == DType::structured);
  OriginReader reader(index);
  for (uint64_t g = 0; g < 3; ++g) {
    CHECK(read_entry(reader, index, g, 0) == text_bytes(captions[g]));
  }
  check_sample_reader(index);
}

TEST_CASE("hdf5 ragged: CSR slices, mixed with a fixed field", "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "graphs.h5";
  Graphs g;
  Storage storage;
  const bool chunked = GENERATE(false, true);
  if (chunked) storage = {.chunk_rows = 3, .deflate = true};
  write_graphs(src, g, storage);
  auto request = test::request_for({src});
  request.ragged = {{"nodes", "/x", "/graph/x_ptr"}};
  request.fields = {{"", "/y"}};
  request.memory_budget = 256;

  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.samples() == g.graphs());
  REQUIRE(index.fields().size() == 2);
  CHECK(index.fields()[0].name == "y");
  const auto& nodes = index.fields()[1];
  CHECK(nodes.name == "nodes");
  CHECK(nodes.variable);
  CHECK(nodes.row_bytes == 0);
  CHECK(nodes.shape == std::vector<uint64_t>{4});
  CHECK(nodes.dtype == DType::uint32);
  CHECK(nodes.source == "/x:/graph/x_ptr");

  auto x = read_back(src, "/x", H5T_NATIVE_UINT32);
  OriginReader reader(index);
  for (uint64_t i = 0; i < g.graphs(); ++i) {
    INFO("graph " << i);
    CHECK(in_place(index, i, 1) == !chunked);
    auto expected = slice(x, static_cast<uint64_t>(g.ptr[i]) * 16,
                          static_cast<uint64_t>(g.ptr[i + 1] - g.ptr[i]) * 16);
    CHECK(read_entry(reader, index, i, 1) == expected);
  }
  check_rows(index, 0, read_back(src, "/y", H5T_NATIVE_INT64));
  check_sample_reader(index);
}

TEST_CASE("hdf5 rows: several sources are concatenated", "[hdf5]") {
  test::TempDir dir;
  auto a = test::pattern_bytes(7 * 8, 5);
  auto b = test::pattern_bytes(5 * 8, 6);
  {
    auto file = create_file(dir / "a.h5");
    write_dataset(file, "/v", H5T_NATIVE_DOUBLE, {7}, a.data());
  }
  {
    auto file = create_file(dir / "b.h5");
    write_dataset(file, "/v", H5T_NATIVE_DOUBLE, {5}, b.data(), {.chunk_rows = 2});
  }
  auto request = test::request_for({dir / "a.h5", dir / "b.h5"});
  request.fields = {{"", "v"}};
  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.samples() == 12);
  CHECK(attribute(index, "source_starts") == "0,7");
  check_rows(index, 0, a);
  check_rows(index, 0, b, 7);
  check_sample_reader(index);
}

TEST_CASE("hdf5 groups: one sample per group, in name order", "[hdf5]") {
  test::TempDir dir;
  const auto src = dir / "g.h5";
  const std::vector<std::string> names = {"s04", "s01", "s03", "s00", "s02", "s05"};
  write_groups(src, names);
  {
    auto file = Id(H5Fopen(src.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    int64_t stray = 1;  // a dataset beside the groups: not matched by the pattern
    write_dataset(file, "/samples_note", H5T_NATIVE_INT64, {}, &stray);
  }
  auto request = test::request_for({src});
  request.groups = "/samples/*";
  request.memory_budget = 64;
  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.samples() == 6);
  REQUIRE(index.fields().size() == 2);
  CHECK(attribute(index, "mode") == "groups");
  CHECK(attribute(index, "groups") == "/samples/*");
  const auto& x = index.fields()[0];
  CHECK(x.name == "x");
  CHECK(x.variable);
  CHECK(x.dtype == DType::uint8);
  const auto& y = index.fields()[1];
  CHECK(y.name == "y");
  CHECK_FALSE(y.variable);
  CHECK(y.row_bytes == 8);
  CHECK(y.shape.empty());

  OriginReader reader(index);
  for (uint64_t i = 0; i < 6; ++i) {
    const auto group = "/samples/s0" + std::to_string(i);
    INFO(group);
    CHECK(read_entry(reader, index, i, 0) == read_back(src, group + "/x", H5T_NATIVE_UINT8));
    CHECK(read_entry(reader, index, i, 1) == read_back(src, group + "/y", H5T_NATIVE_INT64));
  }
  CHECK(in_place(index, 1, 0));        // s01 was created second: contiguous
  CHECK_FALSE(in_place(index, 4, 0));  // s04 was created first: chunked
  check_sample_reader(index);
}

TEST_CASE("hdf5 groups: nested patterns and several sources", "[hdf5]") {
  test::TempDir dir;
  write_groups(dir / "a.h5", {"sample_1", "sample_0", "other"}, "/train/part0");
  {
    auto file = Id(H5Fopen((dir / "a.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    auto x = test::pattern_bytes(3, 9);
    int64_t y = 5;
    write_dataset(file, "/train/part1/sample_9/x", H5T_NATIVE_UINT8, {3}, x.data());
    write_dataset(file, "/train/part1/sample_9/y", H5T_NATIVE_INT64, {}, &y);
  }
  write_groups(dir / "b.h5", {"sample_4"}, "/train/p");
  auto request = test::request_for({dir / "a.h5", dir / "b.h5"});
  request.groups = "/train/*/sample_*";
  request.pack = true;
  auto index = test::flatten_to(dir / "out.ddx", request);
  REQUIRE(index.samples() == 4);
  CHECK(attribute(index, "source_starts") == "0,3");
  OriginReader reader(index);
  const std::vector<std::pair<fs::path, std::string>> order = {
      {dir / "a.h5", "/train/part0/sample_0"},
      {dir / "a.h5", "/train/part0/sample_1"},
      {dir / "a.h5", "/train/part1/sample_9"},
      {dir / "b.h5", "/train/p/sample_4"}};
  for (uint64_t i = 0; i < order.size(); ++i) {
    INFO(order[i].second);
    CHECK_FALSE(in_place(index, i, 0));
    CHECK(read_entry(reader, index, i, 0) ==
          read_back(order[i].first, order[i].second + "/x", H5T_NATIVE_UINT8));
  }
  check_sample_reader(index);
}

TEST_CASE("hdf5: detection by signature and extension", "[hdf5]") {
  test::TempDir dir;
  auto v = test::pattern_bytes(4 * 2, 7);
  {
    auto file = create_file(dir / "noext");
    write_dataset(file, "/v", H5T_NATIVE_INT16, {4}, v.data());
  }
  auto request = test::request_for({dir / "noext"});
  request.fields = {{"", "/v"}};
  auto index = test::flatten_to(dir / "out.ddx", request);
  CHECK(index.manifest().format == "hdf5");
  check_rows(index, 0, v);
}

/// Files with one problem each: /a and /b differ in length, offsets that go backwards, past
/// the end or below zero, a scalar, strings; groups.h5 has a group without x and a field whose
/// dtype changes between groups; text.h5 is not HDF5.
struct BadInputs {
  test::TempDir dir;
  fs::path src = dir / "bad.h5";

  BadInputs() {
    auto rows = test::pattern_bytes(10 * 8, 8);
    std::vector<int64_t> backwards{0, 2, 5, 4, 6}, too_far{0, 2, 11}, negative{-1, 2, 3},
        two{0, 4, 10};
    int64_t scalar = 3;
    {
      auto file = create_file(src);
      write_dataset(file, "/a", H5T_NATIVE_INT64, {10}, rows.data());
      write_dataset(file, "/b", H5T_NATIVE_INT64, {9}, rows.data());
      write_dataset(file, "/backwards", H5T_NATIVE_INT64, {5}, backwards.data());
      write_dataset(file, "/too_far", H5T_NATIVE_INT64, {3}, too_far.data());
      write_dataset(file, "/negative", H5T_NATIVE_INT64, {3}, negative.data());
      write_dataset(file, "/two_ptr", H5T_NATIVE_INT64, {3}, two.data());
      write_dataset(file, "/scalar", H5T_NATIVE_INT64, {}, &scalar);
      Id str_type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(str_type, 4);
      write_dataset(file, "/names", str_type, {2}, "abcdefgh");
      Id opaque(H5Tcreate(H5T_OPAQUE, 4), H5Tclose);
      write_dataset(file, "/blobs", opaque, {2}, "abcdefgh");
    }
    write_groups(dir / "groups.h5", {"g0", "g1"});
    auto file = Id(H5Fopen((dir / "groups.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    int64_t y = 1;
    write_dataset(file, "/samples/g2/y", H5T_NATIVE_INT64, {}, &y);  // no x
    double z = 1;
    write_dataset(file, "/other/g0/x", H5T_NATIVE_DOUBLE, {}, &z);
    write_dataset(file, "/other/g1/x", H5T_NATIVE_UINT8, {}, &z);
    std::ofstream(dir / "text.h5") << "not hdf5\n";
  }

  formats::FlattenRequest rows(std::initializer_list<formats::FieldSpec> fields,
                               std::initializer_list<formats::RaggedSpec> ragged = {},
                               const fs::path& file = {}) const {
    auto r = test::request_for({file.empty() ? src : file});
    r.fields = fields;
    r.ragged = ragged;
    return r;
  }
  formats::FlattenRequest groups(const std::string& pattern) const {
    auto r = test::request_for({dir / "groups.h5"});
    r.groups = pattern;
    return r;
  }
};

TEST_CASE("hdf5: bad input is a one-line UsageError and leaves no index", "[hdf5]") {
  BadInputs in;
  const auto& dir = in.dir;
  SECTION("not an HDF5 file") {
    expect_usage_error(dir, in.rows({{"", "/a"}}, {}, dir / "text.h5"),
                       {"text.h5", "not an HDF5 file"});
  }
  SECTION("missing file") {
    expect_usage_error(dir, in.rows({{"", "/a"}}, {}, dir / "nope.h5"),
                       {"nope.h5", "no such file"});
  }
  SECTION("dataset path missing") {
    expect_usage_error(dir, in.rows({{"", "/missing/x"}}), {"no dataset /missing/x", "bad.h5"});
  }
  SECTION("fields with different first dimension") {
    expect_usage_error(dir, in.rows({{"", "/a"}, {"", "/b"}}),
                       {"a (/a: 10 rows)", "b (/b: 9 rows)", "different first"});
  }
  SECTION("offsets not monotonic") {
    expect_usage_error(dir, in.rows({}, {{"r", "/a", "/backwards"}}),
                       {"/backwards", "not monotonic at 2", "o[2]=5 > o[3]=4"});
  }
  SECTION("offsets past the data's end") {
    expect_usage_error(dir, in.rows({}, {{"r", "/a", "/too_far"}}),
                       {"/too_far", "o[2]=11", "past the end of /a (10 rows)"});
  }
  SECTION("negative first offset") {
    expect_usage_error(dir, in.rows({}, {{"r", "/a", "/negative"}}), {"/negative", "o[0]=-1"});
  }
  SECTION("ragged length differs from a field") {
    expect_usage_error(dir, in.rows({{"", "/a"}}, {{"r", "/a", "/two_ptr"}}),
                       {"a (/a: 10 rows)", "r (/two_ptr: 3 offsets)"});
  }
  SECTION("unsupported dtype") {
    expect_usage_error(
        dir, in.rows({{"", "/blobs"}}),
        {"dataset /blobs", "bad.h5", "unsupported type opaque of 4 bytes", "no type to record"});
  }
  SECTION("a scalar given as --field") {
    expect_usage_error(dir, in.rows({{"", "/scalar"}}), {"/scalar", "scalar"});
  }
  SECTION("a group given as --field") {
    expect_usage_error(dir, in.rows({{"", "/samples"}}, {}, dir / "groups.h5"),
                       {"/samples", "not a dataset"});
  }
  SECTION("the same field name twice") {
    expect_usage_error(dir, in.rows({{"", "/a"}, {"a", "/b"}}), {"'a' given twice"});
  }
  SECTION("nothing to index") {
    expect_usage_error(dir, in.rows({}),
                       {"--field", "--groups", "/a [10] int64", "/names [2] string"});
  }
  SECTION("pattern that matches nothing") {
    expect_usage_error(dir, in.groups("/nothing/*"),
                       {"'/nothing/*'", "matches no group", "groups.h5"});
  }
  SECTION("a group without a field") {
    expect_usage_error(dir, in.groups("/samples/*"), {"group /samples/g2", "no dataset 'x'"});
  }
  SECTION("dtype differs between groups") {
    expect_usage_error(dir, in.groups("/other/*"), {"/other/g1/x", "uint8", "float64"});
  }
  SECTION("groups mixed with fields") {
    auto r = in.groups("/samples/*");
    r.fields = {{"", "/a"}};
    expect_usage_error(dir, r, {"--groups", "--field"});
  }
}
