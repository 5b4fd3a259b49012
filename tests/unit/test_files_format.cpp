// The "files" format: directory walks, @lists, in place and packed, and bad input.
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
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

/// Every sample of the only field, read back from origin and checked against its checksum.
std::vector<Bytes> read_samples(const ddstage::Index& index) {
  ddstage::OriginReader reader(index, {.verify = true});
  std::vector<Bytes> samples;
  for (uint64_t id = 0; id < index.samples(); ++id) {
    Bytes bytes(index.entry(id, 0).length);
    CHECK(reader.read_and_check(id, 0, bytes));
    samples.push_back(std::move(bytes));
  }
  return samples;
}

/// Runs fn in a child process without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so a mode-000 file
/// is unreadable even when the tests run as root. Returns the child's exit code.
int without_dac_override(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    int code = 100;
    if (::syscall(SYS_capget, &header, data) == 0) {
      for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH}) {
        data[CAP_TO_INDEX(cap)].effective &= ~CAP_TO_MASK(cap);
      }
      if (::syscall(SYS_capset, &header, data) == 0) code = fn();
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("files: a directory tree is flattened in sorted order, in place or packed", "[files]") {
  TempDir tmp;
  const auto src = tmp / "src";
  // Relative paths in byte order: '-' (0x2d) sorts before '/' (0x2f).
  const std::vector<std::pair<std::string, Bytes>> files = {
      {"a-b.bin", pattern_bytes(50, 1)},
      {"a/x.bin", pattern_bytes(3000, 2)},
      {"a/y.bin", pattern_bytes(1, 3)},
      {"b.bin", pattern_bytes(100, 4)},
      {"deep/er/z.bin", pattern_bytes(20000, 5)},  // larger than the memory budget: mapped
      {"empty.bin", {}},
  };
  for (const auto& [name, bytes] : files) write_file(src / name, bytes);
  fs::create_symlink(src / "a/x.bin", src / "link.bin");     // followed: one more sample
  fs::create_directory_symlink(src / "a", src / "linkdir");  // not descended
  fs::create_symlink(src / "missing", src / "dangling");     // not a file

  const bool pack = GENERATE(false, true);
  auto request = request_for({src.string()});
  request.pack = pack;
  request.memory_budget = 4096;
  flatten_to(tmp / "out.ddx", request, 8192);

  const auto index = ddstage::Index::open(tmp / "out.ddx");
  CHECK(index.manifest().format == "files");
  REQUIRE(index.fields().size() == 1);
  const auto& field = index.fields()[0];
  CHECK(field.name == "data");
  CHECK(field.dtype == ddstage::DType::bytes);
  CHECK(field.variable);
  CHECK(field.shape.empty());
  CHECK(field.source == "file contents");
  REQUIRE(index.samples() == files.size() + 1);

  const auto samples = read_samples(index);
  for (size_t i = 0; i < files.size(); ++i) CHECK(samples[i] == files[i].second);
  CHECK(samples.back() == files[1].second);  // link.bin -> a/x.bin

  int pack_files = 0;
  for (const auto& f : index.files()) pack_files += f.kind == ddstage::FileKind::pack;
  for (uint64_t id = 0; id < index.samples(); ++id) {
    const auto& entry = index.entry(id, 0);
    CHECK((index.files()[entry.file].kind == ddstage::FileKind::pack) == pack);
    if (!pack) CHECK(entry.offset == 0);
  }
  // 24 KB packed with 8 KiB pack files: the writer must have rotated.
  if (pack) CHECK(pack_files > 1);
}

TEST_CASE("files: plain files, @lists and directories keep the order given", "[files]") {
  TempDir tmp;
  const auto src = tmp / "src";
  const auto single = pattern_bytes(10, 1), b = pattern_bytes(20, 2), y = pattern_bytes(30, 3);
  const auto q = pattern_bytes(40, 4), x = pattern_bytes(50, 5);
  write_file(src / "single.bin", single);
  write_file(src / "b.bin", b);
  write_file(src / "a/y.bin", y);
  write_file(src / "a/x.bin", x);
  write_file(src / "lists/sub/q.bin", q);
  {
    std::ofstream list(src / "lists/list.txt");
    list << "# relative paths are relative to this file's directory\n"
         << "\n"
         << "../b.bin\r\n"
         << (src / "a/y.bin").string() << "\n"
         << "   \n"
         << "sub\n";
  }
  const std::string list_arg = "@" + (src / "lists/list.txt").string();

  // A plain file first is not recognised by itself: name the format.
  auto request = request_for({(src / "single.bin").string(), list_arg, (src / "a").string()});
  request.format = "files";
  flatten_to(tmp / "out.ddx", request);
  const auto index = ddstage::Index::open(tmp / "out.ddx");
  CHECK(index.manifest().format == "files");
  CHECK(read_samples(index) == std::vector<Bytes>{single, b, y, q, x, y});

  // A list as the first source is recognised as the files format.
  flatten_to(tmp / "list.ddx", request_for({list_arg}));
  CHECK(read_samples(ddstage::Index::open(tmp / "list.ddx")) == std::vector<Bytes>{b, y, q});
}

TEST_CASE("files: bad input is a clear error and leaves no index behind", "[files]") {
  TempDir tmp;
  const auto src = tmp / "src";
  write_file(src / "ok.bin", pattern_bytes(10, 1));
  const auto out_dir = tmp / "out";
  fs::create_directories(out_dir);
  const auto out = out_dir / "x.ddx";
  auto request = request_for({});
  request.format = "files";
  auto run = [&] { flatten_to(out, request); };

  SECTION("an empty directory") {
    fs::create_directories(src / "empty/nested");
    request.sources = {(src / "empty").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(),
                      Contains("directory " + (src / "empty").string() + " contains no files"));
  }
  SECTION("a missing source") {
    request.sources = {(src / "ok.bin").string(), (src / "nope.bin").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("nope.bin") && Contains("does not exist"));
  }
  SECTION("a list naming a missing file") {
    std::ofstream(src / "list.txt") << "# header\nok.bin\nnope.bin\n";
    request.sources = {"@" + (src / "list.txt").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("list.txt line 3") && Contains("nope.bin"));
  }
  SECTION("a missing list file") {
    request.sources = {"@" + (src / "nolist.txt").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("list file") && Contains("nolist.txt does not exist"));
  }
  SECTION("a list naming no files") {
    std::ofstream(src / "list.txt") << "# nothing here\n\n";
    request.sources = {"@" + (src / "list.txt").string()};
    CHECK_THROWS_AS(run(), ddstage::UsageError);
    CHECK_THROWS_WITH(run(), Contains("list.txt") && Contains("names no files"));
  }
  SECTION("an unreadable file") {
    write_file(src / "secret.bin", pattern_bytes(10, 2));
    fs::permissions(src / "secret.bin", fs::perms::none);
    request.sources = {src.string()};
    const int code = without_dac_override([&] {
      try {
        run();
        return 1;
      } catch (const ddstage::Error& e) {
        const std::string what = e.what();
        if (what.find("secret.bin") != std::string::npos &&
            what.find("denied") != std::string::npos)
          return 0;
        std::fprintf(stderr, "unexpected message: %s\n", e.what());
        return 2;
      }
    });
    CHECK(code == 0);
  }
  CHECK(fs::is_empty(out_dir));
}
