// µs per row of a served store's batches into host memory, and into GPU memory by the direct
// and staged paths, with the mean per-batch GPU sync from the read profile. For
// tests/gpu/run-on-device.sh and the closing numbers of issue 6; `ddstage bench store` is the
// user-facing bench. Usage: gpu_bench STORE_DIR DATASET FIELD [BATCH [BATCHES]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ddstage/client.hpp"
#include "ddstage/error.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/gpu_info.hpp"

using namespace ddstage;

namespace {

struct Result {
  double us_per_row = 0;
  double sync_us_per_batch = 0;
  std::string paths;
};

/// BATCHES timed batches of BATCH random ids (after 5 untimed ones), the same ids for every
/// destination. gpu_path empty: host memory.
Result run(const std::filesystem::path& store, const std::string& name, const std::string& field,
           std::size_t batch, int batches, const std::string& gpu_path) {
  const auto settings = Settings::resolve(
      gpu_path.empty() ? std::map<std::string, std::string>{}
                       : std::map<std::string, std::string>{{"gpu.path", gpu_path}},
      {}, std::nullopt, false);
  const auto dataset = Client(store, settings).open(name);
  auto reader = dataset.reader();
  const uint64_t samples = dataset.index().samples();
  std::mt19937_64 rng(42);
  std::vector<std::vector<uint64_t>> id_sets(static_cast<std::size_t>(batches) + 5);
  uint64_t max_bytes = 0;
  for (auto& ids : id_sets) {
    ids.resize(batch);
    for (auto& id : ids) id = rng() % samples;
    max_bytes = std::max(max_bytes, reader.batch_bytes(field, ids));
  }
  std::vector<std::byte> host(max_bytes);
  std::optional<DeviceAllocation> device;
  if (!gpu_path.empty()) device.emplace(0, max_bytes);
  const auto read = [&](const std::vector<uint64_t>& ids) {
    const auto bytes = reader.batch_bytes(field, ids);
    if (device) return reader.get_batch(field, ids, device->buffer(bytes));
    reader.get_batch(field, ids, std::span(host).first(bytes));
  };
  for (int i = 0; i < 5; ++i) read(id_sets[static_cast<std::size_t>(i)]);
  profile::reset();
  profile::enable(true);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 5; i < batches + 5; ++i) read(id_sets[static_cast<std::size_t>(i)]);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto report = profile::snapshot();
  profile::enable(false);
  Result r;
  r.us_per_row = us / static_cast<double>(batch * static_cast<std::size_t>(batches));
  r.sync_us_per_batch =
      report.stage_ns[static_cast<std::size_t>(ProfileStage::gpu_sync)].mean() / 1e3;
  for (const auto& [path, n] : report.paths) r.paths += (r.paths.empty() ? "" : ",") + path;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gpu_bench STORE_DIR DATASET FIELD [BATCH [BATCHES]]\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows before a later error, in order
  const std::size_t batch = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 128;
  const int batches = argc > 5 ? std::atoi(argv[5]) : 50;
  try {
    const auto dataset = Client(argv[1]).open(argv[2]);
    const auto rows = dataset.index().fields()[dataset.index().field_id(argv[3])].row_bytes;
    std::printf("%-8s %10s %6s %12s %14s %9s  %s\n", "dest", "row_bytes", "batch", "us/row",
                "gpu_sync_us", "vs_host", "paths");
    const Result host = run(argv[1], argv[2], argv[3], batch, batches, "");
    std::printf("%-8s %10llu %6zu %12.3f %14s %9s  %s\n", "host",
                static_cast<unsigned long long>(rows), batch, host.us_per_row, "-", "1.00",
                host.paths.c_str());
    for (const char* path : {"direct", "staged"}) {
      const Result r = run(argv[1], argv[2], argv[3], batch, batches, path);
      std::printf("%-8s %10llu %6zu %12.3f %14.1f %9.2f  %s\n", path,
                  static_cast<unsigned long long>(rows), batch, r.us_per_row, r.sync_us_per_batch,
                  r.us_per_row / host.us_per_row, r.paths.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
