#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "process.hpp"

using namespace ddstage::detail;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t MiB = 1 << 20;

/// A tmpfs of `bytes` mounted on a fresh directory for the test's life (needs root, as the
/// tests run); empty path when the mount is refused.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(uint64_t bytes) {
    char name[] = "/tmp/ddstage-shm-test-XXXXXX";
    if (!::mkdtemp(name)) return;
    m_dir = name;
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", name, "tmpfs", 0, options.c_str()) != 0) {
      WARN("cannot mount a tmpfs on " << name << ": " << std::strerror(errno) << " (not root?)");
      fs::remove(m_dir);
      m_dir.clear();
    }
  }
  ~SmallTmpfs() {
    if (m_dir.empty()) return;
    ::umount2(m_dir.c_str(), MNT_DETACH);
    fs::remove(m_dir);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  const fs::path& dir() const { return m_dir; }

 private:
  fs::path m_dir;
};

void fill(const fs::path& file, uint64_t bytes) {
  std::ofstream out(file, std::ios::binary);
  const std::vector<char> block(MiB, 'x');
  for (uint64_t done = 0; done < bytes; done += MiB) out.write(block.data(), block.size());
}

}  // namespace

TEST_CASE("the default memory limit is capped by the free space of a small /dev/shm",
          "[mem_limit]") {
  REQUIRE(mem_available() > 256 * MiB);  // so the 64 MiB tmpfs, not RAM, is the bound below
  SmallTmpfs shm(64 * MiB);
  if (shm.dir().empty()) return;  // warned: the cap is then untested here

  const MemoryLimit one = default_memory_limit(1, shm.dir());
  CHECK(one.bytes <= 64 * MiB);
  CHECK(one.bytes >= 60 * MiB);
  CHECK(one.source == "free space of " + shm.dir().string());

  const MemoryLimit four = default_memory_limit(4, shm.dir());
  CHECK(four.bytes == one.bytes / 4);
  CHECK(four.source.find("shared by 4 holders") != std::string::npos);

  // What other holders already put there is not free.
  fill(shm.dir() / "other-store", 40 * MiB);
  CHECK(default_memory_limit(1, shm.dir()).bytes <= 24 * MiB);
}

TEST_CASE("without a measurable /dev/shm the default memory limit is 80% of MemAvailable",
          "[mem_limit]") {
  const MemoryLimit limit = default_memory_limit(2, "/nonexistent/ddstage-shm");
  CHECK(limit.source == "80% of MemAvailable, shared by 2 holders on this node");
  // MemAvailable moves between the two reads: within 5%.
  const double expected = static_cast<double>(mem_available()) * 0.8 / 2;
  CHECK(static_cast<double>(limit.bytes) == Approx(expected).epsilon(0.05));
  CHECK(default_mem_limit(2) <= limit.bytes + limit.bytes / 20);
}
