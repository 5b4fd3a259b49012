// GPU destinations as a node without a GPU sees them (and a host-only build): every GPU request
// fails with one clear "no GPU" error, and nothing else about the reader changes. On a node with
// a GPU the same cases check that the device is found instead (tests/gpu/ reads on it).
#include <catch2/catch.hpp>
#include <cstdlib>

#include "client_test_store.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/gpu_info.hpp"

using namespace ddstage;
using namespace ddstage::test;
using Catch::Contains;

namespace {

bool has_gpu() {
  for (const auto& r : gpu_info()) {
    if (r.devices > 0) return true;
  }
  return false;
}

/// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    ::setenv(name, value.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (m_old) {
      ::setenv(m_name, m_old->c_str(), 1);
    } else {
      ::unsetenv(m_name);
    }
  }

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

}  // namespace

TEST_CASE("gpu_info: each built runtime reports devices or why there are none", "[gpu]") {
  for (const auto& r : gpu_info()) {
    CHECK((r.kind == MemoryKind::cuda || r.kind == MemoryKind::hip));
    CHECK((r.devices > 0) == r.reason.empty());
    CHECK(r.device_names.size() == static_cast<std::size_t>(r.devices));
    CHECK(r.host_register_read_only.size() == static_cast<std::size_t>(r.devices));
  }
}

TEST_CASE("no GPU: allocations and device batches fail naming it; host batches still read",
          "[gpu]") {
  if (has_gpu()) {
    DeviceAllocation memory(0, 64);
    CHECK(memory.buffer().bytes == 64);
    CHECK_THROWS_WITH(memory.buffer(65), Contains("65 bytes asked"));
    return;
  }
  try {
    DeviceAllocation memory(0, 64);
    FAIL("allocated device memory on a node without a GPU");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK_THAT(e.what(), Contains("no GPU: "));
  }

  TestStore store;
  auto reader = Client(store.dir()).open("d").reader();
  const std::vector<uint64_t> ids{3, 100, 7};
  std::vector<std::byte> fake(3 * x_bytes);
  const DeviceBuffer dest{fake.data(), fake.size(), 0, nullptr};
  CHECK_THROWS_WITH(reader.get_batch("x", ids, dest), Contains("no GPU: "));
  // A bad id is still the caller's error first, before any GPU question.
  const std::vector<uint64_t> bad{samples};
  CHECK_THROWS_AS(reader.get_batch("x", bad, dest), UsageError);
  CHECK(store_batch(reader, "x", ids) == origin_batch(store.index(), 0, ids));
}

TEST_CASE("device_of: the device of device memory; no GPU or host memory named as such", "[gpu]") {
  std::vector<std::byte> host(64);
  if (has_gpu()) {
    DeviceAllocation memory(0, 64);
    CHECK(device_of(memory.buffer().ptr) == 0);
    CHECK_THROWS_AS(device_of(host.data()), UsageError);
    return;
  }
  try {
    device_of(host.data());
    FAIL("found a device on a node without a GPU");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK_THAT(e.what(), Contains("no GPU: "));
  }
}

TEST_CASE("gpu.path: direct, staged or auto; anything else is a usage error naming it",
          "[gpu][settings]") {
  CHECK(Settings().get_string("gpu.path") == "auto");
  for (const char* good : {"direct", "staged", "auto"}) {
    CHECK(Settings::resolve({}, {{"DDSTAGE_GPU_PATH", good}}, std::nullopt, false)
              .get_string("gpu.path") == good);
  }
  CHECK_THROWS_WITH(Settings::resolve({{"gpu.path", "sideways"}}, {}, std::nullopt, false),
                    Contains("gpu.path") && Contains("direct|staged|auto"));
}

TEST_CASE("the bench's GPU path is cached per host under XDG_CACHE_HOME", "[gpu]") {
  TempDir dir;
  ScopedEnv cache("XDG_CACHE_HOME", dir.path().string());
  CHECK(gpu_path_cache_file().parent_path() == dir.path() / "ddstage");
  CHECK(gpu_path_cache_file().filename().string() == "gpu-path-" + this_host());
  CHECK_FALSE(cached_gpu_path());
  cache_gpu_path(GpuPath::direct);
  CHECK(cached_gpu_path() == GpuPath::direct);
  cache_gpu_path(GpuPath::staged);
  CHECK(cached_gpu_path() == GpuPath::staged);
  write_file(gpu_path_cache_file(), pattern_bytes(8, 3));
  CHECK_FALSE(cached_gpu_path());
}
