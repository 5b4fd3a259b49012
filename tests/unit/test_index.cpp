// Index round trip, corruption and versioning, and IndexWriter's all-or-nothing publishing.
#include <fcntl.h>
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/origin_verify.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "index_layout.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;

namespace {

std::vector<FieldInfo> two_fields() {
  return {{"x", DType::float32, {4}, false, 16, "/x"}, {"y", DType::uint8, {}, true, 0, "/y"}};
}

/// A source file of 10 fixed 16-byte rows, then variable rows (sample i has i+1 bytes) packed.
fs::path write_small_index(const test::TempDir& dir, const std::string& name = "d.ddx",
                           bool force = false, uint64_t pack_bytes = 256ull << 20) {
  auto src = dir / "src.bin";
  if (!fs::exists(src)) test::write_file(src, test::pattern_bytes(160, 7));
  auto bytes = test::pattern_bytes(160, 7);
  IndexWriter w({.out = dir / name, .force = force, .pack_bytes = pack_bytes});
  w.set_format("test");
  w.define(two_fields(), 10);
  auto file = w.add_source(src);
  for (uint64_t i = 0; i < 10; ++i) {
    w.put_in_place(i, 0, file, i * 16, std::span(bytes).subspan(i * 16, 16));
    w.put_packed(i, 1, test::pattern_bytes(i + 1, 100 + i));
  }
  w.set_attribute("note", "unit test");
  w.commit();
  return dir / name;
}

/// write_small_index's variable rows of `ids`, back to back.
std::vector<std::byte> small_index_rows(const std::vector<uint64_t>& ids) {
  std::vector<std::byte> rows;
  for (auto id : ids) {
    const auto b = test::pattern_bytes(id + 1, 100 + id);
    rows.insert(rows.end(), b.begin(), b.end());
  }
  return rows;
}

void flip_byte(const fs::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("index round trip: manifest, entries, files, reads", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  auto index = Index::open(path);
  REQUIRE(index.samples() == 10);
  REQUIRE(index.fields().size() == 2);
  CHECK(index.fields()[0].name == "x");
  CHECK(index.fields()[0].shape == std::vector<uint64_t>{4});
  CHECK(index.fields()[1].variable);
  CHECK(index.manifest().name == "d");
  CHECK(index.manifest().format == "test");
  CHECK(index.manifest().attributes.at("note") == "unit test");
  CHECK(index.manifest().root == dir.path());
  CHECK(index.manifest().total_bytes == 160 + 55);
  REQUIRE(index.files().size() == 2);
  CHECK(index.files()[0].path == "src.bin");
  CHECK(index.files()[1].kind == FileKind::pack);
  CHECK(index.resolve(1) == path / "pack-00000.bin");
  CHECK(index.entry(3, 0).offset == 48);
  CHECK(index.entry(3, 1).length == 4);
  CHECK_NOTHROW(index.check_all_fresh());

  OriginReader reader(index, {.verify = true});
  std::vector<uint64_t> ids{9, 0, 3, 3};
  std::vector<std::byte> out(reader.batch_bytes(1, ids));
  reader.read(1, ids, out);
  CHECK(out == small_index_rows(ids));
  CHECK(index.field_id("y") == 1);
  CHECK_THROWS_WITH(index.field_id("z"),
                    Catch::Contains("no field 'z'") && Catch::Contains("x, y"));
  CHECK_THROWS_WITH(index.default_field(), Catch::Contains("--field"));
}

TEST_CASE("pack files rotate at the configured size", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir, "d.ddx", false, 20);
  auto index = Index::open(path);
  std::size_t packs = 0;
  for (const auto& f : index.files()) packs += f.kind == FileKind::pack;
  CHECK(packs > 2);
  OriginReader reader(index, {.verify = true});
  std::vector<std::byte> out(10);
  uint64_t id = 9;
  reader.read(1, {&id, 1}, out);
  CHECK(out == test::pattern_bytes(10, 109));
}

TEST_CASE("a row packed in pieces is the row packed whole: same runs, checksums and bytes",
          "[index]") {
  // Rows of 1 MiB (past a 256 KiB checksum block: a block each) and of 100 bytes (several to a
  // block: packed whole), put in pieces of 300,000 and 7 bytes, against the same rows put whole.
  test::TempDir dir;
  const std::vector<FieldInfo> fields{{"big", DType::uint8, {1u << 20}, false, 1u << 20, "/big"},
                                      {"small", DType::uint8, {100}, false, 100, "/small"}};
  auto write = [&](const std::string& name, bool pieces) {
    IndexWriter w({.out = dir / name});
    w.set_format("test");
    w.define(fields, 3);
    for (uint64_t i = 0; i < 3; ++i) {
      for (uint32_t f = 0; f < 2; ++f) {
        const auto row = test::pattern_bytes(fields[f].row_bytes, 10 * f + i);
        if (!pieces) {
          w.put_packed(i, f, row);
          continue;
        }
        uint64_t at = 0;
        std::vector<uint64_t> sizes;
        w.put_packed_pieces(i, f, row.size(), f == 0 ? 300'000 : 7, [&](std::span<std::byte> out) {
          std::memcpy(out.data(), row.data() + at, out.size());
          at += out.size();
          sizes.push_back(out.size());
        });
        CHECK(at == row.size());
        CHECK(sizes.front() == std::min<uint64_t>(row.size(), f == 0 ? 300'000 : 7));
      }
    }
    w.commit();
    return Index::open(dir / name);
  };
  const auto whole = write("whole.ddx", false);
  const auto pieces = write("pieces.ddx", true);
  for (uint32_t f = 0; f < 2; ++f) {
    CHECK(pieces.runs(f) == whole.runs(f));
    CHECK(pieces.blocks(f) == whole.blocks(f));
    for (uint64_t i = 0; i < 3; ++i) {
      CHECK(pieces.block(i, f).checksum == whole.block(i, f).checksum);
      CHECK(pieces.entry(i, f).length == fields[f].row_bytes);
    }
  }
  OriginReader reader(pieces, {.verify = true});
  const std::vector<uint64_t> ids{2, 0, 1};
  std::vector<std::byte> out(reader.batch_bytes(0, ids));
  reader.read(0, ids, out);
  std::vector<std::byte> expect;
  for (auto id : ids) {
    const auto b = test::pattern_bytes(1u << 20, id);
    expect.insert(expect.end(), b.begin(), b.end());
  }
  CHECK(out == expect);
}

TEST_CASE("an index held as a copy reads on after index.bin is truncated in place", "[index]") {
  // Mapped, the lost pages would raise SIGBUS at the next access (a server rank's death).
  test::TempDir dir;
  const auto path = write_small_index(dir);
  const auto index = Index::open(path, Index::Holding::copied);
  fs::resize_file(path / "index.bin", 0);
  OriginReader reader(index, {.verify = true});
  std::vector<uint64_t> ids{9, 0, 5};
  std::vector<std::byte> out(reader.batch_bytes(1, ids));
  reader.read(1, ids, out);
  CHECK(out == small_index_rows(ids));
  CHECK(index.entry(3, 0).offset == 48);
  CHECK_THROWS_AS(Index::open(path), IndexError);
}

TEST_CASE("a truncated index.bin is refused", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  fs::resize_file(path / "index.bin", fs::file_size(path / "index.bin") - 8);
  CHECK_THROWS_AS(Index::open(path), IndexError);
  fs::resize_file(path / "index.bin", 20);
  CHECK_THROWS_WITH(Index::open(path), Catch::Contains("truncated"));
}

TEST_CASE("a bit flip anywhere in index.bin is detected", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  const auto size = fs::file_size(path / "index.bin");
  for (uint64_t offset : {uint64_t{12}, detail::entries_offset + 40, size - 3}) {
    flip_byte(path / "index.bin", offset);
    CHECK_THROWS_WITH(Index::open(path), Catch::Contains("corrupt"));
    flip_byte(path / "index.bin", offset);
  }
  CHECK_NOTHROW(Index::open(path));
}

TEST_CASE("an index from a newer format version is refused by name", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  detail::IndexHeader h{};
  {
    std::ifstream in(path / "index.bin", std::ios::binary);
    in.read(reinterpret_cast<char*>(&h), sizeof h);
  }
  h.version = index_format_version + 1;
  h.header_checksum = 0;
  h.header_checksum = checksum(std::as_bytes(std::span(&h, 1)));
  {
    std::fstream out(path / "index.bin", std::ios::in | std::ios::out | std::ios::binary);
    out.write(reinterpret_cast<const char*>(&h), sizeof h);
  }
  CHECK_THROWS_WITH(Index::open(path), Catch::Contains("newer ddstage"));
}

TEST_CASE("a manifest from a newer version or missing keys is refused", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  std::string text;
  {
    std::ifstream in(path / "manifest.yaml");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto pos = text.find("format_version: 1");
  REQUIRE(pos != std::string::npos);
  std::ofstream(path / "manifest.yaml") << std::string(text).replace(pos, 17, "format_version: 9");
  CHECK_THROWS_WITH(Index::open(path), Catch::Contains("newer ddstage"));
  std::ofstream(path / "manifest.yaml") << "name: x\n";
  CHECK_THROWS_AS(Index::open(path), IndexError);
  fs::remove(path / "manifest.yaml");
  CHECK_THROWS_AS(Index::open(path), UsageError);
}

TEST_CASE("a changed or missing source is stale", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  auto index = Index::open(path);
  test::write_file(dir / "src.bin", test::pattern_bytes(161, 7));
  CHECK_THROWS_WITH(index.check_all_fresh(),
                    Catch::Contains("src.bin") && Catch::Contains("changed"));
  OriginReader strict(index);
  std::vector<std::byte> out(16);
  uint64_t id = 0;
  CHECK_THROWS_AS(strict.read(0, {&id, 1}, out), StaleError);
  OriginReader lenient(index, {.allow_stale = true});
  CHECK_NOTHROW(lenient.read(0, {&id, 1}, out));
  fs::remove(dir / "src.bin");
  CHECK_THROWS_WITH(index.check_all_fresh(), Catch::Contains("missing"));
}

TEST_CASE("verify catches bytes that changed in place", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  auto index = Index::open(path);
  flip_byte(path / "pack-00000.bin", 3);  // sample 2 of field y: bytes 1..3 of the pack
  OriginReader reader(index, {.verify = true, .allow_stale = true});
  std::vector<uint64_t> ids{2};
  std::vector<std::byte> out(3);
  CHECK_THROWS_WITH(reader.read(1, ids, out),
                    Catch::Contains("checksum mismatch") && Catch::Contains("sample 2"));
}

TEST_CASE("an existing output is kept unless forced, and replaced only when complete", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  CHECK_THROWS_WITH(IndexWriter({.out = path}),
                    Catch::Contains("already exists") && Catch::Contains("--force"));
  {
    IndexWriter w({.out = path, .force = true});
    w.define(two_fields(), 10);
    // Abandoned half-way: the old index must survive and no temporary directory may remain.
  }
  CHECK_NOTHROW(Index::open(path));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 2);  // src.bin and d.ddx

  write_small_index(dir, "d.ddx", true);
  CHECK(Index::open(path).samples() == 10);
  test::write_file(dir / "plain", test::pattern_bytes(4, 1));
  CHECK_THROWS_WITH(IndexWriter({.out = dir / "plain", .force = true}),
                    Catch::Contains("not a ddstage index"));
}

TEST_CASE("running out of file size while packing removes the temporary directory", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, SIG_IGN);
  {
    IndexWriter w({.out = path, .force = true});
    w.define(two_fields(), 10);
    rlimit small{1 << 20, old.rlim_max};
    setrlimit(RLIMIT_FSIZE, &small);
    auto big = test::pattern_bytes(5 << 20, 3);  // larger than the write buffer: written at once
    CHECK_THROWS_AS(w.put_packed(0, 1, big), IoError);
    setrlimit(RLIMIT_FSIZE, &old);
  }
  auto index = Index::open(path);
  CHECK(index.samples() == 10);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 2);
}

TEST_CASE("a source copied entirely into packs is provenance, not a staleness risk", "[index]") {
  test::TempDir dir;
  test::write_file(dir / "src.bin", test::pattern_bytes(32, 1));
  {
    IndexWriter w({.out = dir / "p.ddx"});
    w.define({{"data", DType::bytes, {}, true, 0, "file contents"}}, 2);
    w.add_source(dir / "src.bin");
    auto bytes = test::pattern_bytes(32, 1);
    w.put_packed(0, 0, std::span(bytes).first(16));
    w.put_packed(1, 0, std::span(bytes).subspan(16));
    w.commit();
  }
  auto index = Index::open(dir / "p.ddx");
  REQUIRE(index.files().size() == 2);
  CHECK(index.files()[0].kind == FileKind::copied);
  CHECK(index.files()[0].path == "src.bin");
  test::write_file(dir / "src.bin", test::pattern_bytes(40, 2));
  CHECK_NOTHROW(index.check_all_fresh());
  OriginReader reader(index, {.verify = true});
  std::vector<std::byte> out(16);
  uint64_t id = 1;
  reader.read(0, {&id, 1}, out);
  const auto original = test::pattern_bytes(32, 1);
  CHECK(out == std::vector<std::byte>(original.begin() + 16, original.end()));
}

TEST_CASE("adjacent entries are coalesced without mixing up their destinations", "[index]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  auto index = Index::open(path);
  OriginReader reader(index, {.verify = true});
  // Rows 2,3,4 are adjacent in src.bin but asked out of order, with a repeat.
  std::vector<uint64_t> ids{4, 2, 3, 3};
  std::vector<std::byte> out(reader.batch_bytes(0, ids));
  reader.read(0, ids, out);
  auto src = test::pattern_bytes(160, 7);
  std::vector<std::byte> expect(ids.size() * 16);
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::copy_n(src.begin() + ids[i] * 16, 16, expect.begin() + i * 16);
  CHECK(out == expect);
  std::vector<std::byte> sample(reader.sample_bytes(5));
  reader.read_sample(5, sample);
  CHECK(std::equal(src.begin() + 80, src.begin() + 96, sample.begin()));
  const auto packed = test::pattern_bytes(6, 105);
  CHECK(std::equal(sample.begin() + 16, sample.end(), packed.begin(), packed.end()));
}

// ---- crafted index.bin and manifest.yaml: refused at open, never trusted -----------------

namespace {

/// index.bin's bytes with its header and entries editable, resealed with valid checksums: what
/// a crafted (not merely damaged) index looks like, so the checks behind the checksums run.
struct CraftedIndex {
  explicit CraftedIndex(const fs::path& ddx) : path(ddx / "index.bin") {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    std::memcpy(&header, bytes.data(), sizeof header);
  }
  detail::EntryRecord entry(uint64_t i) const {
    detail::EntryRecord e{};
    std::memcpy(&e, bytes.data() + detail::entries_offset + i * sizeof e, sizeof e);
    return e;
  }
  void set_entry(uint64_t i, const detail::EntryRecord& e) {
    std::memcpy(bytes.data() + detail::entries_offset + i * sizeof e, &e, sizeof e);
  }
  /// Writes the bytes back with the body checksum and then the header checksum recomputed.
  void seal(uint32_t header_bytes = sizeof(detail::IndexHeader)) {
    header.header_bytes = header_bytes;
    const auto body_at = std::min<uint64_t>(header.entries_offset, bytes.size());
    header.body_checksum = checksum(std::as_bytes(std::span(bytes).subspan(body_at)));
    header.header_checksum = 0;
    header.header_checksum = checksum(std::as_bytes(std::span(&header, 1)).first(header_bytes));
    std::memcpy(bytes.data(), &header, sizeof header);
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  /// Rewrites the header as format 1 wrote it: 80 bytes, no fields checksum.
  void seal_as_format_1() {
    header.version = 1;
    header.fields_checksum = 0;
    seal(detail::header_bytes_v1);
  }

  /// A format 3 record of type T at offset.
  template <typename T>
  T at(uint64_t offset) const {
    T t{};
    std::memcpy(&t, bytes.data() + offset, sizeof t);
    return t;
  }
  template <typename T>
  void set_at(uint64_t offset, const T& t) {
    std::memcpy(bytes.data() + offset, &t, sizeof t);
  }
  uint64_t table_at(uint32_t field) const {
    return header.entries_offset + field * sizeof(detail::FieldTable);
  }

  fs::path path;
  std::string bytes;
  detail::IndexHeader header{};
};

/// Rewrites a format 3 index.bin as format 2 wrote it: every (sample, field) an entry record,
/// sample-major, with its own row's checksum; file table and names unchanged. How the tests
/// keep files of formats 1 and 2 opening.
void rewrite_as_format_2(const fs::path& ddx) {
  const auto index = Index::open(ddx);
  CraftedIndex crafted(ddx);
  std::string body;
  for (uint64_t s = 0; s < index.samples(); ++s) {
    for (uint32_t f = 0; f < index.fields().size(); ++f) {
      const Entry e = index.entry(s, f);
      std::string row(e.length, '\0');
      std::ifstream in(index.resolve(e.file), std::ios::binary);
      in.seekg(static_cast<std::streamoff>(e.offset));
      in.read(row.data(), static_cast<std::streamsize>(row.size()));
      const detail::EntryRecord r{e.file, 0, e.offset, e.length,
                                  checksum(std::as_bytes(std::span(row)))};
      body.append(reinterpret_cast<const char*>(&r), sizeof r);
    }
  }
  auto& h = crafted.header;
  const std::string tail = crafted.bytes.substr(h.file_table_offset);
  const uint64_t names_after_table = h.names_offset - h.file_table_offset;
  crafted.bytes = crafted.bytes.substr(0, detail::entries_offset) + body + tail;
  h.version = 2;
  h.file_table_offset = detail::entries_offset + body.size();
  h.names_offset = h.file_table_offset + names_after_table;
  h.file_bytes = crafted.bytes.size();
  crafted.seal();
  REQUIRE(Index::open(ddx).samples() == index.samples());
}

void edit_manifest(const fs::path& ddx, const std::string& old_text, const std::string& new_text) {
  std::string text;
  {
    std::ifstream in(ddx / "manifest.yaml");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto pos = text.find(old_text);
  REQUIRE(pos != std::string::npos);
  std::ofstream(ddx / "manifest.yaml") << text.replace(pos, old_text.size(), new_text);
}

}  // namespace

TEST_CASE("crafted entries are refused at open, naming index.bin and the entry",
          "[index][corrupt]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  rewrite_as_format_2(path);
  // Entry 2 * 3 is sample 3's fixed field x (16 bytes at 48 of src.bin); 2 * 3 + 1 its variable y.
  struct Case {
    const char* what;
    uint64_t entry;
    detail::EntryRecord (*edit)(detail::EntryRecord);
    const char* words;
  };
  const Case cases[] = {
      {"file id out of range", 6,
       [](detail::EntryRecord e) {
         e.file = 7;
         return e;
       },
       "names file 7 of 2"},
      {"row 999 of 100", 6,
       [](detail::EntryRecord e) {
         e.offset = 999 * 16;
         return e;
       },
       "past the end of src.bin"},
      {"offset + length wraps", 6,
       [](detail::EntryRecord e) {
         e.offset = ~uint64_t{0} - 8;
         return e;
       },
       "past the end"},
      {"length wraps", 7,
       [](detail::EntryRecord e) {
         e.length = ~uint64_t{0};
         return e;
       },
       "past the end"},
      {"fixed row shorter than row_bytes", 6,
       [](detail::EntryRecord e) {
         e.length = 8;
         return e;
       },
       "row_bytes 16"},
  };
  for (const auto& c : cases) {
    SECTION(c.what) {
      CraftedIndex crafted(path);
      crafted.set_entry(c.entry, c.edit(crafted.entry(c.entry)));
      crafted.seal();
      CHECK_THROWS_WITH(Index::open(path), Catch::Contains((path / "index.bin").string()) &&
                                               Catch::Contains("sample 3, field") &&
                                               Catch::Contains(c.words));
    }
  }
}

TEST_CASE("crafted header counts and section offsets are refused, never read past",
          "[index][corrupt]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  rewrite_as_format_2(path);  // its sections are sized by the counts; format 3's below
  struct Case {
    const char* what;
    void (*edit)(detail::IndexHeader&);
  };
  const Case cases[] = {
      {"samples * fields * 32 wraps",
       [](detail::IndexHeader& h) { h.samples = (uint64_t{1} << 59) + 10; }},
      {"more fields than the file holds", [](detail::IndexHeader& h) { h.fields = ~uint32_t{0}; }},
      {"no samples", [](detail::IndexHeader& h) { h.samples = 0; }},
      {"entries overlap the header", [](detail::IndexHeader& h) { h.entries_offset = 40; }},
      {"entries misaligned", [](detail::IndexHeader& h) { h.entries_offset += 4; }},
      {"file table wraps", [](detail::IndexHeader& h) { h.file_table_offset = ~uint64_t{0} - 15; }},
      {"file count past the names", [](detail::IndexHeader& h) { h.files = 1000; }},
      {"names past the end", [](detail::IndexHeader& h) { h.names_offset = h.file_bytes + 8; }},
      {"header size of another format", [](detail::IndexHeader& h) { h.version = 1; }},
      {"format 0", [](detail::IndexHeader& h) { h.version = 0; }},
  };
  for (const auto& c : cases) {
    SECTION(c.what) {
      CraftedIndex crafted(path);
      c.edit(crafted.header);
      crafted.seal();
      CHECK_THROWS_WITH(Index::open(path),
                        Catch::Contains("index.bin") && Catch::Contains("corrupt"));
    }
  }
  SECTION("a file-table name that wraps") {
    CraftedIndex crafted(path);
    detail::FileRecord r{};
    std::memcpy(&r, crafted.bytes.data() + crafted.header.file_table_offset, sizeof r);
    r.name_offset = ~uint64_t{0} - 2;
    std::memcpy(crafted.bytes.data() + crafted.header.file_table_offset, &r, sizeof r);
    crafted.seal();
    CHECK_THROWS_WITH(Index::open(path), Catch::Contains("file table row 0"));
  }
}

TEST_CASE("a manifest field that disagrees with itself or with index.bin is refused",
          "[index][corrupt]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  struct Case {
    const char* old_text;
    const char* new_text;
    const char* words;
  };
  const Case cases[] = {
      {"shape: [4]", "shape: [3]", "row_bytes 16, but its shape [3] of float32 makes 12"},
      {"row_bytes: 16", "row_bytes: 0", "row_bytes 0, but its shape"},
      {"row_bytes: 16", "row_bytes: 15", "row_bytes 15"},
      {"shape: [4]", "shape: [4611686018427387904, 4]", "too large"},
      {"variable: false", "variable: true", "is variable but has row_bytes 16"},
      {"name: y", "name: x", "listed twice"},
      {"total_bytes: 215", "total_bytes: 216", "total_bytes is 216, the entries hold 215"},
      // Consistent with itself, so only the field table's checksum in index.bin can tell.
      {"shape: [4]", "shape: [2, 2]", "field table"},
      {"dtype: float32", "dtype: int32", "field table"},
      {"name: y", "name: z", "field table"},
      {"source: /x", "source: {a: [1]}", "is not a ddstage manifest"},
  };
  for (const auto& c : cases) {
    SECTION(std::string(c.old_text) + " -> " + c.new_text) {
      edit_manifest(path, c.old_text, c.new_text);
      CHECK_THROWS_WITH(Index::open(path),
                        Catch::Contains("manifest.yaml") && Catch::Contains(c.words));
      CHECK_THROWS_AS(Index::open(path), IndexError);
    }
  }
}

TEST_CASE("a format 1 index still opens, and its entries still bind the manifest's sizes",
          "[index][corrupt]") {
  test::TempDir dir;
  auto path = write_small_index(dir);
  rewrite_as_format_2(path);
  CraftedIndex(path).seal_as_format_1();
  REQUIRE(Index::open(path).fields()[0].row_bytes == 16);
  SECTION("a reshape with the same bytes is harmless") {
    edit_manifest(path, "shape: [4]", "shape: [2, 2]");
    CHECK(Index::open(path).fields()[0].shape == std::vector<uint64_t>{2, 2});
  }
  SECTION("shape and row_bytes edited together disagree with the entries") {
    edit_manifest(path, "shape: [4]", "shape: [2]");
    edit_manifest(path, "row_bytes: 16", "row_bytes: 8");
    CHECK_THROWS_WITH(
        Index::open(path),
        Catch::Contains("index.bin is corrupt") &&
            Catch::Contains("holds 16 bytes, but manifest.yaml gives the field row_bytes 8"));
  }
}

TEST_CASE("a variable row of partial elements, or an entry into a copied source, is refused",
          "[index][corrupt]") {
  test::TempDir dir;
  test::write_file(dir / "src.bin", test::pattern_bytes(64, 1));
  test::write_file(dir / "unused.bin", test::pattern_bytes(8, 2));
  {
    IndexWriter w({.out = dir / "v.ddx"});
    w.define({{"v", DType::int32, {}, true, 0, "/v"}}, 2);
    auto file = w.add_source(dir / "src.bin");
    w.add_source(dir / "unused.bin");
    auto bytes = test::pattern_bytes(64, 1);
    w.put_in_place(0, 0, file, 0, std::span(bytes).first(8));
    w.put_in_place(1, 0, file, 8, std::span(bytes).subspan(8, 12));
    w.commit();
  }
  const auto path = dir / "v.ddx";
  rewrite_as_format_2(path);
  REQUIRE(Index::open(path).files()[1].kind == FileKind::copied);
  SECTION("3 bytes of int32") {
    CraftedIndex crafted(path);
    auto e = crafted.entry(1);
    e.length = 3;
    crafted.set_entry(1, e);
    crafted.seal();
    CHECK_THROWS_WITH(Index::open(path), Catch::Contains("not a whole number of 4-byte elements"));
  }
  SECTION("a copied source") {
    CraftedIndex crafted(path);
    auto e = crafted.entry(0);
    e.file = 1;
    e.offset = 0;
    crafted.set_entry(0, e);
    crafted.seal();
    CHECK_THROWS_WITH(Index::open(path), Catch::Contains("copied into packs"));
  }
}

TEST_CASE("a writer refuses a field whose row_bytes disagrees with its shape", "[index][corrupt]") {
  test::TempDir dir;
  IndexWriter w({.out = dir / "w.ddx"});
  CHECK_THROWS_WITH(w.define({{"x", DType::float32, {4}, false, 12, "/x"}}, 1),
                    Catch::Contains("row_bytes 12, but its shape [4] of float32 makes 16"));
}

TEST_CASE("a fixed field of zero-byte rows is laid out and loaded through an offsets table",
          "[index][corrupt]") {
  test::TempDir dir;
  test::write_file(dir / "src.bin", test::pattern_bytes(12, 3));
  {
    IndexWriter w({.out = dir / "z.ddx"});
    w.define(
        {{"empty", DType::uint8, {0}, false, 0, "/empty"}, {"x", DType::int32, {}, false, 4, "/x"}},
        3);
    auto file = w.add_source(dir / "src.bin");
    auto bytes = test::pattern_bytes(12, 3);
    for (uint64_t s = 0; s < 3; ++s) {
      w.put_in_place(s, 0, file, 0, {});
      w.put_in_place(s, 1, file, s * 4, std::span(bytes).subspan(s * 4, 4));
    }
    w.commit();
  }
  const auto index = Index::open(dir / "z.ddx");
  const ShardLayout layout(index, {1, 3});
  std::vector<std::byte> region(layout.total_bytes());
  fill_shard(index, layout, region, {.verify = true, .streams = 1});
  const ShardView view(region, 2, {1, 3});
  CHECK(view.row(2, 0).empty());
  const auto bytes = test::pattern_bytes(12, 3);
  CHECK(std::equal(view.row(2, 1).begin(), view.row(2, 1).end(), bytes.begin() + 8, bytes.end()));
}

// ---- format 3: runs and blocks --------------------------------------------------------------

namespace {

constexpr uint64_t row16 = 16;

FieldInfo fixed16(const std::string& name) {
  return {name, DType::uint8, {16}, false, 16, "/" + name};
}

/// n rows of 16 bytes in one source file, row i at i * 16.
struct Rows16 {
  Rows16(const test::TempDir& dir, uint64_t n)
      : path(dir / "rows.bin"), bytes(test::pattern_bytes(n * 16, 5)) {
    test::write_file(path, bytes);
  }
  std::span<const std::byte> row(uint64_t i) const { return std::span(bytes).subspan(i * 16, 16); }
  fs::path path;
  std::vector<std::byte> bytes;
};

/// Every entry of field f points at row i of rows.bin (file 0) and reads back through a
/// verifying reader.
void check_rows(const Index& index, uint32_t f, const Rows16& rows) {
  for (uint64_t s = 0; s < index.samples(); ++s) {
    const Entry e = index.entry(s, f);
    REQUIRE(e.offset == s * row16);
    REQUIRE(e.length == row16);
  }
  OriginReader reader(index, {.verify = true});
  std::vector<uint64_t> ids{index.samples() - 1, 0, index.samples() / 2};
  std::vector<std::byte> out(reader.batch_bytes(f, ids));
  reader.read(f, ids, out);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(std::equal(out.begin() + static_cast<std::ptrdiff_t>(i * 16),
                     out.begin() + static_cast<std::ptrdiff_t>(i * 16 + 16),
                     rows.row(ids[i]).begin()));
  }
}

/// Edits field f's table of a format 3 index.bin.
template <typename Change>
void edit_table(CraftedIndex& c, uint32_t f, Change change) {
  auto t = c.at<detail::FieldTable>(c.table_at(f));
  change(t);
  c.set_at(c.table_at(f), t);
}

/// Edits run i of field 0.
template <typename Change>
void edit(CraftedIndex& c, uint64_t i, Change change) {
  const uint64_t at =
      c.at<detail::FieldTable>(c.table_at(0)).records_offset + i * sizeof(detail::RunRecord);
  auto r = c.at<detail::RunRecord>(at);
  change(r);
  c.set_at(at, r);
}

std::string index_bin_bytes(const fs::path& ddx) {
  std::ifstream in(ddx / "index.bin", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("rows put in order at a fixed stride are one run with a checksum per block",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 40000;  // 16 KiB-row blocks of 16 bytes: 3 blocks, the last shorter
  Rows16 rows(dir, n);
  {
    IndexWriter w({.out = dir / "a.ddx"});
    w.define({fixed16("x")}, n);
    const auto file = w.add_source(rows.path);
    for (uint64_t i = 0; i < n; ++i) w.put_in_place(i, 0, file, i * 16, rows.row(i));
    w.commit();
  }
  const auto index = Index::open(dir / "a.ddx");
  CHECK(index.runs(0) == 1);
  CHECK(index.blocks(0) == 3);
  const Block last = index.block(n - 1, 0);
  CHECK(last.first_sample == 32768);
  CHECK(last.rows == n - 32768);
  CHECK(last.checksum == checksum(std::span(rows.bytes).subspan(32768 * 16)));
  const Block first = index.block(100, 0);
  CHECK(first.first_sample == 0);
  CHECK(first.checksum == checksum(std::span(rows.bytes).first(16384 * 16)));
  check_rows(index, 0, rows);
  CHECK(fs::file_size(dir / "a.ddx" / "index.bin") < 1024);

  SECTION("put_rows_in_place in pieces writes the very same index.bin") {
    {
      IndexWriter w({.out = dir / "b.ddx"});
      w.define({fixed16("x")}, n);
      const auto file = w.add_source(rows.path);
      for (uint64_t first = 0; first < n; first += 7001) {
        const uint64_t count = std::min<uint64_t>(7001, n - first);
        w.put_rows_in_place(0, first, count, file, first * 16, 16, 16,
                            std::span(rows.bytes).subspan(first * 16, count * 16));
      }
      w.commit();
    }
    CHECK(index_bin_bytes(dir / "b.ddx") == index_bin_bytes(dir / "a.ddx"));
  }
}

TEST_CASE("out-of-order puts make more runs, sorted and merged where blocks line up",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 3 * 16384 + 10;
  Rows16 rows(dir, n);
  SECTION("whole blocks in reverse order merge back into one run") {
    {
      IndexWriter w({.out = dir / "r.ddx"});
      w.define({fixed16("x")}, n);
      const auto file = w.add_source(rows.path);
      for (uint64_t b = 4; b-- > 0;) {
        const uint64_t first = b * 16384;
        const uint64_t count = std::min<uint64_t>(16384, n - first);
        w.put_rows_in_place(0, first, count, file, first * 16, 16, 16,
                            std::span(rows.bytes).subspan(first * 16, count * 16));
      }
      w.commit();
    }
    const auto index = Index::open(dir / "r.ddx");
    CHECK(index.runs(0) == 1);
    CHECK(index.blocks(0) == 4);
    check_rows(index, 0, rows);
  }
  SECTION("pieces that split blocks stay separate runs, each with its own blocks") {
    {
      IndexWriter w({.out = dir / "s.ddx"});
      w.define({fixed16("x")}, n);
      const auto file = w.add_source(rows.path);
      for (uint64_t first : {uint64_t{20000}, uint64_t{10000}, uint64_t{0}}) {
        const uint64_t count = first == 20000 ? n - 20000 : 10000;
        w.put_rows_in_place(0, first, count, file, first * 16, 16, 16,
                            std::span(rows.bytes).subspan(first * 16, count * 16));
      }
      w.commit();
    }
    // 0.. and 10000.. end mid-block, so nothing merges.
    const auto index = Index::open(dir / "s.ddx");
    CHECK(index.runs(0) == 3);
    CHECK(index.block(15000, 0).first_sample == 10000);
    CHECK(index.block(15000, 0).rows == 10000);
    CHECK(index.block(25000, 0).first_sample == 20000);
    CHECK(index.block(25000, 0).rows == 16384);
    CHECK(index.block(n - 1, 0).rows == n - 36384);
    check_rows(index, 0, rows);
  }
  SECTION("single rows in reverse order: every row its own run, stored as entries") {
    {
      IndexWriter w({.out = dir / "e.ddx"});
      w.define({fixed16("x")}, 100);
      const auto file = w.add_source(rows.path);
      for (uint64_t i = 100; i-- > 0;) w.put_in_place(i, 0, file, i * 16, rows.row(i));
      w.commit();
    }
    const auto index = Index::open(dir / "e.ddx");
    CHECK(index.runs(0) == 100);
    CHECK(index.block(7, 0).rows == 1);
    CHECK(index.block(7, 0).checksum == checksum(rows.row(7)));
    check_rows(index, 0, rows);
  }
}

TEST_CASE("a row put twice or never is a logic error at commit", "[index][runs]") {
  test::TempDir dir;
  Rows16 rows(dir, 10);
  IndexWriter w({.out = dir / "t.ddx"});
  w.define({fixed16("x")}, 10);
  const auto file = w.add_source(rows.path);
  SECTION("twice") {
    for (uint64_t i = 0; i < 10; ++i) w.put_in_place(i, 0, file, i * 16, rows.row(i));
    w.put_in_place(4, 0, file, 4 * 16, rows.row(4));
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("sample 4") && Catch::Contains("twice"));
  }
  SECTION("never") {
    for (uint64_t i = 0; i < 10; ++i) {
      if (i != 6) w.put_in_place(i, 0, file, i * 16, rows.row(i));
    }
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("1 entries") && Catch::Contains("never put"));
  }
  CHECK_THROWS_AS(w.put_in_place(10, 0, file, 0, rows.row(0)), std::logic_error);
  CHECK_FALSE(fs::exists(dir / "t.ddx"));
}

TEST_CASE("interleaved fixed fields in packs are a run per field and pack; variable rows entries",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 5000;
  const auto out = dir / "p.ddx";
  {
    // a and b sample by sample (24 bytes a sample: 2 packs of 64 KiB), then v field by field.
    IndexWriter w({.out = out, .pack_bytes = 64u << 10});
    w.define({fixed16("a"),
              {"b", DType::uint64, {}, false, 8, "/b"},
              {"v", DType::uint8, {}, true, 0, "/v"}},
             n);
    for (uint64_t i = 0; i < n; ++i) {
      w.put_packed(i, 0, test::pattern_bytes(16, i));
      w.put_packed(i, 1, test::pattern_bytes(8, n + i));
    }
    for (uint64_t i = 0; i < n; ++i) w.put_packed(i, 2, test::pattern_bytes(i % 7, 2 * n + i));
    w.commit();
  }
  const auto index = Index::open(out);
  uint64_t packs = 0;
  for (const auto& f : index.files()) packs += f.kind == FileKind::pack;
  REQUIRE(packs == 3);
  CHECK(index.runs(0) == 2);  // one per pack: rollover starts a run
  CHECK(index.runs(1) == 2);
  CHECK(index.runs(2) == n);                                             // lengths vary: row by row
  CHECK(index.entry(2, 0).offset - index.entry(1, 0).offset == 16 + 8);  // the sample's bytes
  OriginReader reader(index, {.verify = true});
  for (uint32_t f = 0; f < 3; ++f) {
    std::vector<uint64_t> ids{n - 1, 0, 2500, 2501, 1999, 2000};
    std::vector<std::byte> got(reader.batch_bytes(f, ids));
    reader.read(f, ids, got);
    std::vector<std::byte> expect;
    for (uint64_t i : ids) {
      const auto row = f == 0   ? test::pattern_bytes(16, i)
                       : f == 1 ? test::pattern_bytes(8, n + i)
                                : test::pattern_bytes(i % 7, 2 * n + i);
      expect.insert(expect.end(), row.begin(), row.end());
    }
    CHECK(got == expect);
  }
  CHECK(verify_origin(index, {.threads = 2}).failures == 0);
}

TEST_CASE("a flipped byte in a multi-row block is found by every verify path", "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 40000;
  Rows16 rows(dir, n);
  {
    IndexWriter w({.out = dir / "f.ddx"});
    w.define({fixed16("x")}, n);
    const auto file = w.add_source(rows.path);
    w.put_rows_in_place(0, 0, n, file, 0, 16, 16, rows.bytes);
    w.commit();
  }
  const auto index = Index::open(dir / "f.ddx");
  flip_byte(rows.path, 20000 * 16 + 5);      // sample 20000, in the block of samples 16384..32767
  const std::vector<uint64_t> other{20001};  // a row of the damaged block, itself intact
  std::vector<std::byte> out(16);
  OriginReader plain(index, {.allow_stale = true});
  plain.read(0, other, out);
  CHECK(std::equal(out.begin(), out.end(), rows.row(20001).begin()));

  OriginReader reader(index, {.verify = true, .allow_stale = true});
  CHECK_THROWS_WITH(reader.read(0, other, out),
                    Catch::Contains("checksum mismatch") && Catch::Contains("rows.bin") &&
                        Catch::Contains("samples 16384..32767") && Catch::Contains("sample 20001"));
  const std::vector<uint64_t> elsewhere{100, 39999};
  std::vector<std::byte> two(32);
  CHECK_NOTHROW(reader.read(0, elsewhere, two));
  CHECK_FALSE(reader.read_and_check(20001, 0, out));

  const auto report = verify_origin(index, {.threads = 2, .allow_stale = true});
  CHECK(report.failures == 1);
  REQUIRE(report.first_failures.size() == 1);
  CHECK(report.first_failures[0].sample == 16384);
  CHECK_THAT(report.first_failures[0].reason, Catch::Contains("16384..32767"));

  // Shards whose edge cuts the damaged block: the part outside is read from origin.
  for (const ShardRange range :
       {ShardRange{20000, 25000}, ShardRange{30000, 40000}, ShardRange{0, 17000}}) {
    const ShardLayout layout(index, range);
    std::vector<std::byte> region(layout.total_bytes());
    CHECK_THROWS_WITH(
        fill_shard(index, layout, region,
                   {.verify = true, .allow_stale = true, .streams = 2, .chunk_bytes = 4096}),
        Catch::Contains("checksum mismatch") && Catch::Contains("samples 16384..32767"));
    CHECK_NOTHROW(fill_shard(index, layout, region, {.allow_stale = true, .streams = 2}));
  }
  const ShardLayout clean(index, {32768, 40000});
  std::vector<std::byte> region(clean.total_bytes());
  CHECK_NOTHROW(
      fill_shard(index, clean, region,
                 {.verify = true, .allow_stale = true, .streams = 2, .chunk_bytes = 4096}));
}

TEST_CASE("an index of 10^6 rows of one run takes kilobytes", "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 1'000'000;
  const auto src = dir / "big.bin";
  test::write_file(src, {});
  fs::resize_file(src, n * 16);  // sparse: zero rows
  {
    IndexWriter w({.out = dir / "big.ddx"});
    w.define({fixed16("x")}, n);
    const auto file = w.add_source(src);
    const std::vector<std::byte> zeros(65536 * 16);
    for (uint64_t first = 0; first < n; first += 65536) {
      const uint64_t count = std::min<uint64_t>(65536, n - first);
      w.put_rows_in_place(0, first, count, file, first * 16, 16, 16,
                          std::span(zeros).first(count * 16));
    }
    w.commit();
  }
  CHECK(fs::file_size(dir / "big.ddx" / "index.bin") < 4096);
  const auto index = Index::open(dir / "big.ddx");
  CHECK(index.entry(999'999, 0).offset == 999'999 * 16);
  CHECK(index.blocks(0) == (n + 16383) / 16384);
}

TEST_CASE("flatten progress counts bytes and samples, ending at the totals", "[index][runs]") {
  test::TempDir dir;
  std::vector<ProgressUpdate> seen;
  {
    IndexWriter w(
        {.out = dir / "g.ddx", .progress = [&](const ProgressUpdate& p) { seen.push_back(p); }});
    w.define({{"big", DType::uint8, {}, true, 0, "/big"}, fixed16("small")}, 40);
    w.expect_bytes(40 * (50000 + 16));
    for (uint64_t i = 0; i < 40; ++i) {
      w.put_packed(i, 0, test::pattern_bytes(50000, i));
      w.put_packed(i, 1, test::pattern_bytes(16, i));
      if (i == 19)
        std::this_thread::sleep_for(std::chrono::milliseconds(250));  // one update mid-way
    }
    w.commit();
  }
  REQUIRE(seen.size() >= 2);
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].bytes_done >= seen[i - 1].bytes_done);
  CHECK(seen.front().total_bytes == 40 * 50016);
  CHECK(seen.front().total_samples == 40);
  CHECK(seen.back().final);
  CHECK(seen.back().bytes_done == 40 * 50016);
  CHECK(seen.back().total_bytes == 40 * 50016);
  CHECK(seen.back().samples_done == 40);
}

TEST_CASE("crafted format 3 run tables are refused at open, naming the damage",
          "[index][corrupt][runs]") {
  test::TempDir dir;
  const uint64_t n = 40000;
  Rows16 rows(dir, n);
  const auto path = dir / "c.ddx";
  {
    IndexWriter w({.out = path});
    w.define({fixed16("x"), {"v", DType::uint8, {}, true, 0, "/v"}}, n);
    const auto file = w.add_source(rows.path);
    w.put_rows_in_place(0, 0, 20000, file, 0, 16, 16, std::span(rows.bytes).first(20000 * 16));
    // Samples 20000.. repeat rows 0..: a second run.
    w.put_rows_in_place(0, 20000, 20000, file, 0, 16, 16, std::span(rows.bytes).first(20000 * 16));
    for (uint64_t i = 0; i < n; ++i)
      w.put_in_place(i, 1, file, i, std::span(rows.bytes).subspan(i, i % 3));
    w.commit();
  }
  {
    const auto index = Index::open(path);
    REQUIRE(index.runs(0) == 2);
    REQUIRE(index.runs(1) == n);
  }
  using detail::FieldTable;
  using detail::RunRecord;
  struct Case {
    const char* what;
    void (*edit)(CraftedIndex&);
    const char* words;
  };
  const Case cases[] = {
      {"a gap between runs",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { ++r.first_sample; }); },
       "covers samples from 20001"},
      {"runs overlapping", [](CraftedIndex& c) { edit(c, 0, [](RunRecord& r) { ++r.count; }); },
       "covers samples from 20000"},
      {"a run past the samples",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { r.count = ~uint64_t{0}; }); },
       "run 1 covers"},
      {"no blocks per row",
       [](CraftedIndex& c) { edit(c, 0, [](RunRecord& r) { r.block_rows = 0; }); },
       "blocks the table does not hold"},
      {"blocks of another run",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { r.first_block = 0; }); },
       "blocks the table does not hold"},
      {"more blocks than the table",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { r.block_rows = 1; }); },
       "blocks the table does not hold"},
      {"a stride past the file",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { r.stride = 40; }); },
       "past the end of rows.bin"},
      {"a stride that wraps",
       [](CraftedIndex& c) { edit(c, 1, [](RunRecord& r) { r.stride = uint64_t{1} << 60; }); },
       "past the end"},
      {"a row of another length",
       [](CraftedIndex& c) { edit(c, 0, [](RunRecord& r) { r.length = 8; }); }, "row_bytes 16"},
      {"a file past the table",
       [](CraftedIndex& c) { edit(c, 0, [](RunRecord& r) { r.file = 3; }); }, "names file 3 of 1"},
      {"layout 7", [](CraftedIndex& c) { edit_table(c, 0, [](FieldTable& t) { t.layout = 7; }); },
       "field 0 has a run table"},
      {"runs past the file",
       [](CraftedIndex& c) {
         edit_table(c, 0, [](FieldTable& t) { t.records = uint64_t{1} << 58; });
       },
       "field 0 has a run table"},
      {"blocks over the header",
       [](CraftedIndex& c) { edit_table(c, 0, [](FieldTable& t) { t.blocks_offset = 8; }); },
       "field 0 has a run table"},
      {"entries fewer than samples",
       [](CraftedIndex& c) { edit_table(c, 1, [](FieldTable& t) { --t.records; }); },
       "field 1 has an entry table"},
      {"an entry past its file",
       [](CraftedIndex& c) {
         const auto at =
             c.at<FieldTable>(c.table_at(1)).records_offset + 5 * sizeof(detail::EntryRecord);
         auto e = c.at<detail::EntryRecord>(at);
         e.offset = ~uint64_t{0};
         c.set_at(at, e);
       },
       "sample 5, field 'v' lies past the end"},
  };
  for (const auto& c : cases) {
    SECTION(c.what) {
      CraftedIndex crafted(path);
      c.edit(crafted);
      crafted.seal();
      CHECK_THROWS_WITH(Index::open(path),
                        Catch::Contains("index.bin") && Catch::Contains(c.words));
      CHECK_THROWS_AS(Index::open(path), IndexError);
    }
  }
}

namespace {

/// A variable uint8 field.
FieldInfo variable_bytes(const std::string& name) {
  return {name, DType::uint8, {}, true, 0, "/" + name};
}

/// Every row of field f reads back through a verifying reader as the bytes of `source` its
/// entry names, and each row's block checksum holds it.
void check_variable_rows(const Index& index, uint32_t f, const std::vector<std::byte>& source) {
  for (uint64_t s = 0; s < index.samples(); ++s) {
    const Entry e = index.entry(s, f);
    const Block b = index.block(s, f);
    if (b.rows == 1) REQUIRE(b.checksum == checksum(std::span(source).subspan(e.offset, e.length)));
  }
  OriginReader reader(index, {.verify = true});
  std::vector<uint64_t> ids{0, index.samples() / 2, index.samples() - 1};
  std::vector<std::byte> out(reader.batch_bytes(f, ids));
  reader.read(f, ids, out);
  uint64_t at = 0;
  for (uint64_t s : ids) {
    const Entry e = index.entry(s, f);
    CHECK(std::equal(out.begin() + static_cast<std::ptrdiff_t>(at),
                     out.begin() + static_cast<std::ptrdiff_t>(at + e.length),
                     source.begin() + static_cast<std::ptrdiff_t>(e.offset)));
    at += e.length;
  }
}

/// Resident anonymous memory (heap) of this process, from /proc/self/status.
uint64_t rss_anon_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_CASE("a field of one-row runs and a few pairs is stored as entries, each row checksummed",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 1000;
  const auto source = test::pattern_bytes(1 << 16, 9);
  const auto src = dir / "src.bin";
  test::write_file(src, source);
  {
    IndexWriter w({.out = dir / "p.ddx"});
    w.define({variable_bytes("v")}, n);
    const auto file = w.add_source(src);
    for (uint64_t s = 0; s < n; ++s) {
      // Samples 10-11 and 500-502 continue each other (equal length, next offset): runs.
      const bool paired = (s >= 10 && s <= 11) || (s >= 500 && s <= 502);
      const uint64_t length = paired ? 3 : 1 + (s * 7919) % 50;
      const uint64_t offset = paired ? 1000 + s * 3 : (s * 104729) % 60000;
      w.put_in_place(s, 0, file, offset, std::span(source).subspan(offset, length));
    }
    w.commit();
  }
  const auto index = Index::open(dir / "p.ddx");
  CHECK(index.runs(0) == n);  // entries: 32 bytes a row, not 64 for runs of one row
  CHECK(index.entry(11, 0).offset == 1000 + 33);
  CHECK(fs::file_size(dir / "p.ddx" / "index.bin") <
        detail::entries_offset + sizeof(detail::FieldTable) + n * 32 + 256);
  check_variable_rows(index, 0, source);
  for (uint64_t s : {10, 11, 500, 502}) CHECK(index.block(s, 0).rows == 1);
}

TEST_CASE("a long run with one-row runs around it is stored as runs, in sample order",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 20000;
  const auto source = test::pattern_bytes(1 << 16, 11);
  const auto src = dir / "src.bin";
  test::write_file(src, source);
  {
    IndexWriter w({.out = dir / "r.ddx", .pack_bytes = 1000});
    w.define({variable_bytes("v")}, n);
    const auto file = w.add_source(src);
    const auto put = [&](uint64_t s) {
      if (s >= 3 && s < n - 3) {
        w.put_in_place(s, 0, file, s * 2, std::span(source).subspan(s * 2, 2));
      } else {
        w.put_packed(s, 0, std::span(source).subspan(s, 1 + s % 5));  // lengths differ: no runs
      }
    };
    // The last rows first: one-row runs land in their file before and after the long run.
    for (uint64_t s = n - 3; s < n; ++s) put(s);
    for (uint64_t s = 0; s < n - 3; ++s) put(s);
    w.commit();
  }
  const auto index = Index::open(dir / "r.ddx");
  CHECK(index.runs(0) == 7);
  CHECK(fs::file_size(dir / "r.ddx" / "index.bin") < 4096);
  for (uint64_t s = 0; s < n; ++s) {
    const Entry e = index.entry(s, 0);
    REQUIRE(e.length == (s >= 3 && s < n - 3 ? 2 : 1 + s % 5));
  }
  OriginReader reader(index, {.verify = true});
  std::vector<uint64_t> ids{0, 2, 3, 10000, n - 4, n - 1};
  std::vector<std::byte> out(reader.batch_bytes(0, ids));
  reader.read(0, ids, out);
  uint64_t at = 0;
  for (uint64_t s : ids) {
    const uint64_t len = s >= 3 && s < n - 3 ? 2 : 1 + s % 5;
    const uint64_t from = s >= 3 && s < n - 3 ? s * 2 : s;
    CHECK(std::equal(out.begin() + static_cast<std::ptrdiff_t>(at),
                     out.begin() + static_cast<std::ptrdiff_t>(at + len),
                     source.begin() + static_cast<std::ptrdiff_t>(from)));
    at += len;
  }
}

TEST_CASE("one-row runs of a 10^6-row field are spilled to a mapped file, not the heap",
          "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 1'000'000;
  const auto source = test::pattern_bytes(1 << 16, 13);
  const auto src = dir / "src.bin";
  test::write_file(src, source);
  IndexWriter w({.out = dir / "m.ddx"});
  w.define({variable_bytes("v")}, n);
  const auto file = w.add_source(src);
  const uint64_t before = rss_anon_bytes();
  for (uint64_t s = 0; s < n; ++s) {
    const uint64_t length = 1 + (s * 7919) % 50;
    const uint64_t offset = (s * 104729) % 60000;
    w.put_in_place(s, 0, file, offset, std::span(source).subspan(offset, length));
  }
  // A run record and a block on the heap per row were 64 MB here; the spill file is 32 MB of
  // page cache. The bound leaves room for allocator noise.
  if (before) CHECK(rss_anon_bytes() < before + (16u << 20));
  w.commit();
  const auto index = Index::open(dir / "m.ddx");
  CHECK(index.runs(0) == n);
  CHECK(fs::file_size(dir / "m.ddx" / "index.bin") <
        detail::entries_offset + sizeof(detail::FieldTable) + n * 32 + 256);
  check_variable_rows(index, 0, source);
}

TEST_CASE("a run's blocks larger than a reader may buffer are refused at open",
          "[index][corrupt][runs]") {
  test::TempDir dir;
  const auto src = dir / "src.bin";
  test::write_file(src, test::pattern_bytes(3 << 20, 3));
  const auto path = dir / "b.ddx";
  {
    IndexWriter w({.out = path});
    w.define({variable_bytes("v")}, 40);
    const auto file = w.add_source(src);
    const auto row = test::pattern_bytes(1024, 3);
    for (uint64_t s = 0; s < 40; ++s) w.put_in_place(s, 0, file, 0, row);  // stride 0: one run
    w.commit();
  }
  REQUIRE(Index::open(path).runs(0) == 1);
  using detail::RunRecord;
  SECTION("too many rows") {
    CraftedIndex c(path);
    edit(c, 0, [](RunRecord& r) { r.block_rows = 1u << 20; });
    c.seal();
    CHECK_THROWS_WITH(Index::open(path),
                      Catch::Contains("index.bin") && Catch::Contains("blocks of 1048576 rows"));
  }
  SECTION("too many bytes") {
    CraftedIndex c(path);
    edit(c, 0, [](RunRecord& r) { r.length = 2u << 20; });  // 40 rows of 2 MiB in one block
    c.seal();
    CHECK_THROWS_WITH(Index::open(path),
                      Catch::Contains("index.bin") && Catch::Contains("rows of 2097152 bytes"));
  }
}

TEST_CASE("field stats of a crafted 2^32-row run come from the run, not the rows",
          "[index][runs]") {
  test::TempDir dir;
  const auto src = dir / "src.bin";
  test::write_file(src, test::pattern_bytes(1, 4));
  const auto path = dir / "h.ddx";
  const uint64_t base = 65536;
  {
    // One-byte blocks: room for the block checksums of 2^32 rows in 65536-row blocks.
    IndexWriter w({.out = path, .block_bytes = 1});
    w.define({{"x", DType::uint8, {1}, false, 1, "/x"}}, base);
    const auto file = w.add_source(src);
    const auto row = test::pattern_bytes(1, 4);
    for (uint64_t s = 0; s < base; ++s) w.put_in_place(s, 0, file, 0, row);
    w.commit();
  }
  const uint64_t n = uint64_t{1} << 32;
  {
    CraftedIndex c(path);
    edit(c, 0, [&](detail::RunRecord& r) {
      r.count = n;
      r.block_rows = 65536;
    });
    c.header.samples = n;
    c.seal();
    edit_manifest(path, "samples: 65536", "samples: " + std::to_string(n));
    edit_manifest(path, "total_bytes: 65536", "total_bytes: " + std::to_string(n));
  }
  const auto index = Index::open(path);
  REQUIRE(index.samples() == n);
  const auto stats = index.field_stats(0);
  CHECK(stats.bytes == n);
  CHECK(stats.min_row == 1);
  CHECK(stats.max_row == 1);
}

TEST_CASE("a shard plan walked by runs splits where a walk row by row does", "[index][runs]") {
  test::TempDir dir;
  const uint64_t n = 5000;
  const auto source = test::pattern_bytes(1 << 16, 17);
  const auto src = dir / "src.bin";
  test::write_file(src, source);
  {
    IndexWriter w({.out = dir / "s.ddx", .block_bytes = 64});
    w.define({fixed16("x"), variable_bytes("v")}, n);
    const auto file = w.add_source(src);
    for (uint64_t s = 0; s < n; ++s) {
      // x: runs of 700 rows; v: runs of 3-byte rows, one-row runs and empty rows in stretches.
      w.put_in_place(s, 0, file, (s % 700) * 16, std::span(source).subspan((s % 700) * 16, 16));
      const uint64_t length = s < 2000 ? 3 : s < 3000 ? 1 + s % 7 : s < 4000 ? 0 : 5;
      const uint64_t offset = s < 2000 || s >= 4000 ? s * length : s % 999;
      w.put_in_place(s, 1, file, offset, std::span(source).subspan(offset, length));
    }
    w.commit();
  }
  const auto index = Index::open(dir / "s.ddx");
  REQUIRE(index.runs(1) < n);
  for (int ranks : {1, 2, 3, 7, 64, 4999, 6000}) {
    std::vector<uint64_t> expected(static_cast<std::size_t>(ranks) + 1, n);
    expected[0] = 0;
    const uint64_t total = index.manifest().total_bytes;
    uint64_t before = 0;
    int next = 1;
    for (uint64_t s = 0; s < n && next < ranks; ++s) {
      while (next < ranks &&
             before * static_cast<uint64_t>(ranks) >= total * static_cast<uint64_t>(next))
        expected[static_cast<std::size_t>(next++)] = s;
      before += index.entry(s, 0).length + index.entry(s, 1).length;
    }
    CHECK(ShardPlan::balance(index, ranks).boundaries() == expected);
  }
}
