// SpliceCopier: file-to-file copies into a shared-memory segment land byte for byte, across
// many pipe refills; a source that cannot splice is reported (the caller preads instead), and
// a source that ends early is an error after which the copier still works; past the per-user
// limit on pipe pages, or out of descriptors, the copier declines rather than fail or splice 8 KiB
// at a time.
#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ddstage/error.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/splice_copier.hpp"
#include "test_support.hpp"

using namespace ddstage;
using Catch::Contains;

namespace {

/// Larger than any pipe (1 MiB at most unprivileged), and not a whole number of pages.
constexpr std::size_t source_bytes = (3u << 20) + 12345;

std::string segment_name() {
  return "/ddstage-test-" + std::to_string(::getpid()) + "-splice";
}

bool zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

TEST_CASE("a splice copy fills a shared-memory segment byte for byte", "[splice][load]") {
  test::TempDir dir;
  const auto source = test::pattern_bytes(source_bytes, 42);
  test::write_file(dir / "src.bin", source);
  const auto from = FileDescriptor::open(dir / "src.bin", O_RDONLY);
  auto shm = ShmSegment::create(segment_name(), source_bytes + 8192);
  const auto seg = shm.bytes();
  SpliceCopier copier;

  // The whole file at an unaligned offset, then a part of it over the start of the copy.
  REQUIRE(copier.copy(from, 0, shm.file(), 100, source_bytes));
  REQUIRE(std::equal(source.begin(), source.end(), seg.begin() + 100));
  CHECK(zero(seg.first(100)));
  CHECK(zero(seg.subspan(100 + source_bytes)));
  REQUIRE(copier.copy(from, 7, shm.file(), 0, 50));
  CHECK(std::equal(source.begin() + 7, source.begin() + 57, seg.begin()));
  CHECK(zero(seg.subspan(50, 50)));

  SECTION("a source that ends early is an error naming it; the copier still works after") {
    CHECK_THROWS_WITH(copier.copy(from, source_bytes - 10, shm.file(), 0, 20),
                      Contains("unexpected end of " + (dir / "src.bin").string()));
    REQUIRE(copier.copy(from, 1000, shm.file(), 0, 5000));
    CHECK(std::equal(source.begin() + 1000, source.begin() + 6000, seg.begin()));
  }
  SECTION("a source that cannot splice is reported, nothing written") {
    // A socket has no positioned reads: splice at an offset from it is EINVAL on every kernel,
    // as it is (since 5.10) from a file system without splice support. Bytes wait in it, so a
    // splice that did read would show in the segment.
    int ends[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) == 0);
    const FileDescriptor not_splicable(ends[0], "socket");
    const FileDescriptor writer(ends[1], "socket");
    writer.write_all(std::span(source).first(4096));
    CHECK_FALSE(copier.copy(not_splicable, 0, shm.file(), 0, 4096));
    CHECK(std::equal(source.begin() + 7, source.begin() + 57, seg.begin()));
    REQUIRE(copier.copy(from, 0, shm.file(), 0, 4096));
    CHECK(std::equal(source.begin(), source.begin() + 4096, seg.begin()));
  }
}

namespace {

unsigned long pipe_user_pages_soft() {
  unsigned long pages = 0;
  std::ifstream("/proc/sys/fs/pipe-user-pages-soft") >> pages;
  return pages;
}

/// A source file of pattern bytes, a segment as large, and a copier that has not copied yet.
struct CopyCase {
  CopyCase(std::size_t bytes, int seed)
      : source(test::pattern_bytes(bytes, seed)),
        from(written(dir, source)),
        shm(ShmSegment::create(segment_name(), bytes)) {}

  static FileDescriptor written(const test::TempDir& dir, const std::vector<std::byte>& bytes) {
    test::write_file(dir / "src.bin", bytes);
    return FileDescriptor::open(dir / "src.bin", O_RDONLY);
  }

  test::TempDir dir;
  std::vector<std::byte> source;
  FileDescriptor from;
  ShmSegment shm;
  SpliceCopier copier;
};

/// In a child process: applies `limit` (false: it cannot be applied here), then asks `copier`
/// to copy twice. Exit code: 0 both declined, 1 one copied, 2 one threw, 77 no limit applied.
template <class Limit>
int copy_under(Limit limit, SpliceCopier& copier, const FileDescriptor& from,
               const ShmSegment& shm) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!limit()) ::_exit(77);
    int code = 0;
    try {
      for (int i = 0; i < 2 && code == 0; ++i) {
        if (copier.copy(from, 0, shm.file(), 0, 1 << 20)) code = 1;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 2;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// As an unprivileged user (nobody, when the tests run as root), the user's pipe pages filled
/// past the soft limit with 1 MiB pipes; they stay open until the child exits.
bool past_pipe_limit() {
  if (::geteuid() == 0 &&
      (::setgroups(0, nullptr) != 0 || ::setresgid(test::nobody, test::nobody, test::nobody) ||
       ::setresuid(test::nobody, test::nobody, test::nobody) != 0)) {
    return false;
  }
  for (int i = 0; i < 1 << 16; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0 || ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20) < 0) break;
  }
  return true;
}

/// Every descriptor the process may open taken, so that pipe2 fails with EMFILE.
bool out_of_descriptors() {
  const rlimit few{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &few) != 0) return false;
  while (::dup(STDERR_FILENO) >= 0) {
  }
  return errno == EMFILE;
}

}  // namespace

TEST_CASE("past the per-user limit on pipe pages a splice copy declines", "[splice][load]") {
  if (pipe_user_pages_soft() == 0) {
    WARN("not run: /proc/sys/fs/pipe-user-pages-soft is 0 (no limit to reach)");
    return;
  }
  CopyCase c(2u << 20, 7);
  auto& [dir, source, from, shm, copier] = c;
  const int code = copy_under(past_pipe_limit, copier, from, shm);
  if (code == 77) {
    WARN("not run: cannot become an unprivileged user");
    return;
  }
  CHECK(code == 0);
  CHECK(zero(shm.bytes()));
  // The same copier in this process (privileged, or under the limit again) splices.
  REQUIRE(copier.copy(from, 0, shm.file(), 0, source.size()));
  CHECK(std::equal(source.begin(), source.end(), shm.bytes().begin()));
}

TEST_CASE("a process out of descriptors declines a splice copy instead of failing the load",
          "[splice][load]") {
  CopyCase c(1u << 20, 9);
  const int code = copy_under(out_of_descriptors, c.copier, c.from, c.shm);
  REQUIRE(code != 77);
  CHECK(code == 0);
  CHECK(zero(c.shm.bytes()));
}
