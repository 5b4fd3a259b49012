// AtomicFile: the target holds the old content or the new, never a part; no temporary file
// survives a failure.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "ddstage/tool/atomic_file.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

/// Every name in dir but `keep`: what a writer left behind.
std::vector<std::string> leftovers(const fs::path& dir, const std::string& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != keep) out.push_back(e.path().filename().string());
  }
  return out;
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// Lowers the soft file-size limit for its lifetime, so writes past it fail with EFBIG (SIGXFSZ
/// ignored, as the CLI does).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &m_saved) == 0);
    m_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = m_saved;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &m_saved);
    std::signal(SIGXFSZ, m_handler);
  }

 private:
  rlimit m_saved{};
  void (*m_handler)(int) = SIG_DFL;
};

}  // namespace

TEST_CASE("atomic file: commit replaces the target whole and leaves nothing beside it",
          "[atomic_file]") {
  test::TempDir dir;
  const auto target = dir / "out.txt";
  write_text(target, "old");
  ::chmod(target.c_str(), 0640);
  {
    AtomicFile file(target);
    file.write("new content");
    CHECK(test::read_text(target) == "old");  // not visible before commit
    CHECK(fs::exists(file.temp_path()));
    file.commit();
  }
  CHECK(test::read_text(target) == "new content");
  CHECK(mode_of(target) == 0640);  // a replaced file keeps its permission bits
  CHECK(leftovers(dir.path(), "out.txt").empty());

  AtomicFile secret(dir / "secret.yaml", 0600);
  secret.write("token: x");
  secret.commit();
  CHECK(mode_of(dir / "secret.yaml") == 0600);
}

TEST_CASE("atomic file: a second commit is a logic error and leaves the committed file",
          "[atomic_file]") {
  test::TempDir dir;
  const auto target = dir / "once.txt";
  AtomicFile file(target);
  file.write("first");
  const FileDescriptor kept = file.commit();
  CHECK_THROWS_AS(file.commit(), std::logic_error);
  CHECK(test::read_text(target) == "first");
  CHECK(leftovers(dir.path(), "once.txt").empty());
}

TEST_CASE("atomic file: a failed write leaves the old content and no temporary file",
          "[atomic_file]") {
  test::TempDir dir;
  const auto target = dir / "out.bin";
  write_text(target, "precious");
  {
    AtomicFile file(target);
    const FileSizeLimit limit(16);
    CHECK_THROWS_AS(file.write(std::string(100, 'x')), IoError);
  }
  CHECK(test::read_text(target) == "precious");
  CHECK(leftovers(dir.path(), "out.bin").empty());

  {
    AtomicFile dropped(target);
    dropped.write("never committed");
  }
  CHECK(test::read_text(target) == "precious");
  CHECK(leftovers(dir.path(), "out.bin").empty());
}

TEST_CASE("atomic file: a failed rename leaves the target and no temporary file", "[atomic_file]") {
  test::TempDir dir;
  // A non-empty directory in the target's place: rename(2) over it fails.
  const auto target = dir / "taken";
  fs::create_directories(target / "inside");
  {
    AtomicFile file(target);
    file.write("bytes");
    CHECK_THROWS_AS(file.commit(), IoError);
  }
  CHECK(fs::is_directory(target / "inside"));
  CHECK(leftovers(dir.path(), "taken").empty());
}

TEST_CASE("atomic file: a directory that is gone is an IoError, nothing is created",
          "[atomic_file]") {
  test::TempDir dir;
  CHECK_THROWS_AS(AtomicFile(dir / "missing/out.txt"), IoError);
  CHECK(leftovers(dir.path(), "").empty());
}
