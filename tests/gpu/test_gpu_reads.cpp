// GPU destinations on a real device: direct and staged batches equal the host read byte for
// byte, readers in several threads on their own streams never see each other's rows, and
// gpu.path=auto follows the bench's cached answer. Decides up front: without a device it prints
// "skipped: no GPU (<reason>)" and exits 77, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "client_test_store.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/gpu_info.hpp"

using namespace ddstage;
using namespace ddstage::test;
using Catch::Contains;

namespace {

constexpr int skip_code = 77;

Settings with_path(const char* path) {
  return Settings::resolve({{"gpu.path", path}}, {}, std::nullopt, false);
}

/// One batch into fresh device memory (filled with 0xEE first, so a row never written shows),
/// copied back.
Bytes device_batch(Reader& reader, const std::string& field, std::span<const uint64_t> ids,
                   bool verify) {
  const auto bytes = reader.batch_bytes(field, ids);
  DeviceAllocation memory(0, std::max<uint64_t>(bytes, 1));
  memory.fill(std::byte{0xEE}, memory.buffer().bytes);
  reader.get_batch(field, ids, memory.buffer(bytes), verify);
  Bytes out(bytes);
  memory.copy_to_host(out);
  return out;
}

bool served_by(const ProfileReport& report, const std::string& path) {
  for (const auto& [name, batches] : report.paths) {
    if (name == path) return batches > 0;
  }
  return false;
}

}  // namespace

TEST_CASE("direct and staged batches equal host reads byte for byte", "[gpu]") {
  TestStore store;
  for (const char* path : {"direct", "staged"}) {
    SECTION(path) {
      profile::reset();
      profile::enable(true);
      auto reader = Client(store.dir(), with_path(path)).open("d").reader();
      for (uint64_t seed : {1, 2, 3}) {
        const auto ids = mixed_ids(seed);
        CHECK(device_batch(reader, "x", ids, seed == 1) == origin_batch(store.index(), 0, ids));
        CHECK(device_batch(reader, "g", ids, seed == 2) == origin_batch(store.index(), 1, ids));
      }
      const std::vector<uint64_t> empty_rows{3, 10, 3};  // g's rows of these are empty
      CHECK(device_batch(reader, "g", empty_rows, true).empty());
      const auto report = profile::snapshot();
      profile::enable(false);
      CHECK(served_by(report, std::string("gpu ") + path));
      CHECK(report.stage_ns[static_cast<std::size_t>(ProfileStage::gpu_sync)].count() ==
            report.batches);
    }
  }
}

TEST_CASE("verify on the device path catches a damaged row", "[gpu]") {
  TestStore store;
  store.damage(77, 0);
  for (const char* path : {"direct", "staged"}) {
    auto reader = Client(store.dir(), with_path(path)).open("d").reader();
    const std::vector<uint64_t> ids{76, 77, 78};
    CHECK_THROWS_AS(device_batch(reader, "x", ids, true), ChecksumError);
    CHECK(device_batch(reader, "x", ids, false) != origin_batch(store.index(), 0, ids));
  }
}

TEST_CASE("readers in threads on their own streams: repeated batches, no corruption", "[gpu]") {
  TestStore store;
  for (const char* path : {"direct", "staged"}) {
    const auto dataset = Client(store.dir(), with_path(path)).open("d");
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        auto reader = dataset.reader();
        // One allocation per thread, reused by every batch: what a loader does.
        DeviceAllocation memory(0, 64 << 10);
        std::mt19937_64 rng(static_cast<uint64_t>(t) + 11);
        for (int batch = 0; batch < 200; ++batch) {
          std::vector<uint64_t> ids(1 + rng() % 128);
          for (auto& id : ids) id = rng() % samples;
          const std::string field = batch % 2 ? "g" : "x";
          const auto bytes = reader.batch_bytes(field, ids);
          reader.get_batch(field, ids, memory.buffer(bytes));
          Bytes out(bytes);
          memory.copy_to_host(out);
          if (out != origin_batch(store.index(), field == "x" ? 0 : 1, ids)) ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(bad == 0);
  }
}

TEST_CASE("gpu.path=auto takes the bench's cached path for this host, else staged", "[gpu]") {
  TestStore store;
  TempDir cache;
  ::setenv("XDG_CACHE_HOME", cache.path().c_str(), 1);
  const std::vector<uint64_t> ids{5, 6, 7, 200};
  for (auto [cached, expect] : {std::pair{std::optional<GpuPath>{}, "gpu staged"},
                                std::pair{std::optional<GpuPath>{GpuPath::direct}, "gpu direct"},
                                std::pair{std::optional<GpuPath>{GpuPath::staged}, "gpu staged"}}) {
    if (cached) cache_gpu_path(*cached);
    profile::reset();
    profile::enable(true);
    auto reader = Client(store.dir(), with_path("auto")).open("d").reader();
    CHECK(device_batch(reader, "x", ids, true) == origin_batch(store.index(), 0, ids));
    const auto report = profile::snapshot();
    profile::enable(false);
    CHECK(served_by(report, expect));
  }
  ::unsetenv("XDG_CACHE_HOME");
}

TEST_CASE("bad device destinations are usage errors before anything is read", "[gpu]") {
  TestStore store;
  auto reader = Client(store.dir()).open("d").reader();
  const std::vector<uint64_t> ids{1, 2};
  DeviceAllocation memory(0, 4096);
  CHECK_THROWS_WITH(reader.get_batch("x", ids, memory.buffer(2 * x_bytes + 1)),
                    Contains("device destination holds 193 bytes; the batch needs 192"));
  Bytes host(2 * x_bytes);
  CHECK_THROWS_WITH(reader.get_batch("x", ids, DeviceBuffer{host.data(), host.size(), 0, nullptr}),
                    Contains("is not") && Contains("device memory of device 0"));
  CHECK(device_batch(reader, "x", ids, true) == origin_batch(store.index(), 0, ids));
}

TEST_CASE("an empty batch may come without device memory, as on the host path", "[gpu]") {
  TestStore store;
  for (const char* path : {"direct", "staged"}) {
    auto reader = Client(store.dir(), with_path(path)).open("d").reader();
    CHECK_NOTHROW(reader.get_batch("x", {}, DeviceBuffer{nullptr, 0, 0, nullptr}, true));
    CHECK_THROWS_WITH(
        reader.get_batch("x", std::vector<uint64_t>{1}, DeviceBuffer{nullptr, 0, 0, nullptr}),
        Contains("device memory of device 0"));
  }
}

int main(int argc, char** argv) {
  std::string why;
  for (const auto& r : gpu_info()) {
    if (r.devices > 0) return Catch::Session().run(argc, argv);
    why += (why.empty() ? "" : "; ") + std::string(memory_kind_name(r.kind)) + ": " + r.reason;
  }
  std::printf("skipped: no GPU (%s)\n", why.empty() ? "built without CUDA and HIP" : why.c_str());
  return skip_code;
}
