// The embedded Store under a real mpiexec: every rank loads its shard into an MPI window and
// reads random batches with RMA gets and with the collective all-to-all, compared byte for
// byte with origin reads. Run with any number of ranks (ctest uses 4).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/mpi.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/store.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/gpu_info.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;
using Ids = std::vector<uint64_t>;

namespace {

constexpr uint64_t samples = 400;
constexpr uint64_t x_bytes = 3 * 1024;

int g_rank = 0;
int g_size = 1;
int g_passed = 0;
int g_failed = 0;

/// Counts a check; a failure is printed with its rank and line, and the run goes on (the
/// ranks stay in step: no check skips a collective call).
#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (cond) {                                                                              \
      ++g_passed;                                                                            \
    } else {                                                                                 \
      ++g_failed;                                                                            \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed\n", g_rank, __FILE__, __LINE__, \
                   #cond);                                                                   \
    }                                                                                        \
  } while (0)

/// Runs f and checks that it throws E whose message contains `text`.
template <class E>
void check_throws(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    CHECK(!"no exception");
  } catch (const E& e) {
    const bool found = std::string(e.what()).find(text) != std::string::npos;
    if (!found)
      std::fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", g_rank, e.what(), text.c_str());
    CHECK(found);
  }
}

/// Field "g": variable rows, some empty, some larger than a small round.
uint64_t g_bytes(uint64_t i) {
  return i % 7 == 3 ? 0 : (i * 397) % 9000 + 1;
}

/// A dataset "name" with fixed 3 KB field "x" and variable field "g", both in place in source
/// files under dir/name-src. Samples from split_at on take "x" from a second file, so a
/// test can remove that file and make only the ranks owning them fail to load.
fs::path write_dataset(const fs::path& dir, const std::string& name, uint64_t split_at = samples) {
  const fs::path src = dir / (name + "-src");
  const auto x = test::pattern_bytes(samples * x_bytes, 1);
  test::write_file(src / "x.bin", x);
  test::write_file(src / "x2.bin", x);
  const auto [g, g_at] = test::variable_rows(samples, g_bytes);
  test::write_file(src / "g.bin", g);
  IndexWriter w({.out = dir / (name + ".ddx"), .name = name});
  w.set_format("test");
  w.define({{"x", DType::uint8, {x_bytes}, false, x_bytes, "x.bin"},
            {"g", DType::uint8, {}, true, 0, "g.bin"}},
           samples);
  const uint32_t fx = w.add_source(src / "x.bin"), fx2 = w.add_source(src / "x2.bin"),
                 fg = w.add_source(src / "g.bin");
  for (uint64_t i = 0; i < samples; ++i) {
    w.put_in_place(i, 0, i < split_at ? fx : fx2, i * x_bytes,
                   std::span(x).subspan(i * x_bytes, x_bytes));
    w.put_in_place(i, 1, fg, g_at[i], std::span(g).subspan(g_at[i], g_bytes(i)));
  }
  w.commit();
  return dir / (name + ".ddx");
}

/// Rank 0's scratch directory, known to every rank.
fs::path shared_dir() {
  std::string path;
  if (g_rank == 0) {
    const char* base = std::getenv("DDSTAGE_TEST_TMP");
    path = (fs::path(base ? base : "/tmp") / ("ddstage-mpi-test-" + std::to_string(::getpid())))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  int length = static_cast<int>(path.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path.resize(static_cast<std::size_t>(length));
  MPI_Bcast(path.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

Bytes origin_batch(const Index& index, const std::string& field, const Ids& ids) {
  OriginReader origin(index);
  const uint32_t f = index.field_id(field);
  Bytes out(origin.batch_bytes(f, ids));
  origin.read(f, ids, out);
  return out;
}

/// Random ids, unsorted with repeats, plus the first and last sample of every rank and a run
/// of consecutive ids (one coalesced get).
Ids random_batch(std::mt19937_64& rng, const ShardPlan& plan, std::size_t n) {
  std::uniform_int_distribution<uint64_t> pick(0, samples - 1);
  Ids ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(pick(rng));
  for (int r = 0; r < plan.ranks(); ++r) {
    if (plan.range(r).count() == 0) continue;
    ids.push_back(plan.range(r).last - 1);
    ids.push_back(plan.range(r).first);
  }
  const uint64_t run = pick(rng) % (samples - 20);
  for (uint64_t i = run; i < run + 20; ++i) ids.push_back(i);
  ids.push_back(ids.front());
  std::shuffle(ids.begin() + static_cast<long>(n / 2), ids.end(), rng);
  return ids;
}

void test_rma(Store& store, const Index& index) {
  auto reader = store.reader("d");
  const auto plan = ShardPlan::balance(index, g_size);
  std::mt19937_64 rng(42 + static_cast<uint64_t>(g_rank));
  for (int trial = 0; trial < 20; ++trial) {
    for (const std::string field : {"x", "g"}) {
      const Ids ids = random_batch(rng, plan, 64);
      Bytes got(reader.batch_bytes(field, ids));
      reader.get_batch(field, ids, got, /*verify=*/trial % 2 == 0);
      CHECK(got == origin_batch(index, field, ids));
    }
  }
  Ids one{7};
  Bytes row(x_bytes);
  reader.get_batch("x", one, row, true);
  CHECK(row == origin_batch(index, "x", one));
  std::vector<uint64_t> sizes(3);
  reader.row_sizes("g", Ids{3, 4, 10}, sizes);
  CHECK(sizes == (std::vector<uint64_t>{0, g_bytes(4), 0}));
}

/// Readers in several threads at once: each owns its scratch. Only where get_batch makes no MPI
/// call, a shared window or libfabric (MPI_Get from threads would need MPI_THREAD_MULTIPLE).
void test_threads(Store& store, const Index& index) {
  const auto plan = ShardPlan::balance(index, g_size);
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < ok.size(); ++t) {
    threads.emplace_back([&, t] {
      auto reader = store.reader("d");
      std::mt19937_64 rng(1000 + t);
      for (int trial = 0; trial < 10; ++trial) {
        const Ids ids = random_batch(rng, plan, 48);
        Bytes got(reader.batch_bytes("g", ids));
        reader.get_batch("g", ids, got, true);
        ok[t] += got == origin_batch(index, "g", ids) ? 1 : 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int n : ok) CHECK(n == 10);
}

/// With --gpu: batches into device memory (every rank on device 0), direct and staged, equal
/// origin; direct needs a shared window, without one it is refused and staged still reads.
void test_gpu(const fs::path& dir) {
  const Index index = Index::open(dir / "d.ddx");
  const auto plan = ShardPlan::balance(index, g_size);
  const auto with_path = [](const char* path) {
    return Settings::resolve({{"gpu.path", path}}, {}, std::nullopt, false);
  };
  const auto device_batch = [&](Reader& reader, const std::string& field, const Ids& ids) {
    const auto bytes = reader.batch_bytes(field, ids);
    DeviceAllocation memory(0, std::max<uint64_t>(bytes, 1));
    memory.fill(std::byte{0xEE}, memory.buffer().bytes);
    reader.get_batch(field, ids, memory.buffer(bytes), /*verify=*/true);
    Bytes out(bytes);
    memory.copy_to_host(out);
    return out;
  };
  std::mt19937_64 rng(99 + static_cast<uint64_t>(g_rank));
  for (const char* path : {"direct", "staged"}) {
    for (bool shared : {true, false}) {
      Store store =
          make_store(MPI_COMM_WORLD, {.direct_on_node = shared, .settings = with_path(path)});
      store.load(dir / "d.ddx");
      auto reader = store.reader("d");
      const Ids ids = random_batch(rng, plan, 64);
      if (!shared && g_size > 1 && std::string(path) == "direct") {
        check_throws<UsageError>([&] { device_batch(reader, "x", ids); }, "MPI_Get");
        continue;
      }
      for (const std::string field : {"x", "g"})
        CHECK(device_batch(reader, field, ids) == origin_batch(index, field, ids));
    }
  }
}

void test_collective(Store& store, const Index& index, int trials) {
  auto reader = store.reader("d");
  const auto plan = ShardPlan::balance(index, g_size);
  std::mt19937_64 rng(7 + static_cast<uint64_t>(g_rank));
  for (int trial = 0; trial < trials; ++trial) {
    for (const std::string field : {"x", "g"}) {
      // Ranks ask for different amounts; in one trial the last rank asks for nothing.
      Ids ids = random_batch(rng, plan, 32 + 16 * static_cast<std::size_t>(g_rank));
      if (trial == 1 && g_rank == g_size - 1) ids.clear();
      Bytes got(reader.batch_bytes(field, ids));
      store.get_batch_collective("d", field, ids, got);
      CHECK(got == origin_batch(index, field, ids));
    }
  }
}

void test_bad_input(Store& store) {
  auto reader = store.reader("d");
  Bytes row(x_bytes);
  check_throws<UsageError>([&] { reader.get_batch("x", Ids{samples}, row); }, "out of range");
  check_throws<UsageError>([&] { reader.get_batch("nope", Ids{1}, row); }, "nope");
  check_throws<UsageError>([&] { reader.get_batch("x", Ids{1, 2}, row); }, "destination");
  check_throws<UsageError>([&] { (void)store.reader("missing"); }, "missing");
  // Bad ids on the last rank only: every rank learns of it before any row moves.
  const Ids ids = g_rank == g_size - 1 ? Ids{samples + 5} : Ids{1};
  check_throws<UsageError>([&] { store.get_batch_collective("d", "x", ids, row); }, "out of range");
  // A dataset one rank does not know is bad input like any other: every rank throws.
  const std::string name = g_rank == g_size - 1 ? "missing" : "d";
  check_throws<UsageError>([&] { store.get_batch_collective(name, "x", Ids{1}, row); },
                           "no dataset 'missing'");
  // ...and the ranks are still in step afterwards.
  Bytes got(x_bytes);
  store.get_batch_collective("d", "x", Ids{static_cast<uint64_t>(g_rank)}, got);
  CHECK(got == origin_batch(store.index("d"), "x", Ids{static_cast<uint64_t>(g_rank)}));
}

void test_failed_load(Store& store, const fs::path& dir) {
  // The last quarter's "x" lives in a file that is gone: those ranks fail, all ranks throw.
  check_throws<Error>([&] { store.load(dir / "b.ddx", "", true); }, "x2.bin");
  check_throws<UsageError>([&] { (void)store.reader("b"); }, "no dataset 'b'");
  check_throws<UsageError>([&] { store.load(dir / "d.ddx"); }, "already loaded");
  check_throws<Error>([&] { store.load(dir / "none.ddx"); }, "none.ddx");
}

/// Every rank may hold its shard of d once; the last rank not even that. A load past a rank's
/// limit is refused on every rank, naming that rank, and what was loaded keeps serving.
void test_mem_limit(const fs::path& dir, const Index& index) {
  const auto range = ShardPlan::balance(index, g_size).range(g_rank);
  const uint64_t shard = ShardLayout(index, range).total_bytes();
  {
    Store store = make_store(MPI_COMM_WORLD, {.mem_limit = shard + shard / 2});
    store.load(dir / "d.ddx");
    check_throws<UsageError>([&] { store.load(dir / "d.ddx", "d2"); }, "does not fit");
    check_throws<UsageError>([&] { (void)store.reader("d2"); }, "no dataset 'd2'");
    test_rma(store, index);
  }
  Store small = make_store(MPI_COMM_WORLD, {.mem_limit = g_rank == g_size - 1 ? shard - 1 : shard});
  check_throws<UsageError>([&] { small.load(dir / "d.ddx"); },
                           "rank " + std::to_string(g_size - 1) + " on ");
}

/// Other ranks' rows over libfabric (tcp on loopback) instead of MPI_Get. The shards are then
/// plain memory registered with libfabric, in no MPI window: the Store works where MPI has no
/// one-sided support (OpenMPI with only the tcp BTL: MPI_Win_allocate fails with MPI_ERR_WIN),
/// and get_batch makes no MPI call, so readers in several threads need no
/// MPI_THREAD_MULTIPLE.
void run_fabric([[maybe_unused]] const fs::path& dir) {
#if DDSTAGE_HAVE_FABRIC
  const auto index = Index::open(dir / "d.ddx");
  StoreOptions options{.direct_on_node = false, .transport = "fabric"};
  options.settings = Settings::resolve({{"fabric.provider", "tcp"}, {"fabric.domain", "lo"}}, {},
                                       std::nullopt, false);
  Store fabric = make_store(MPI_COMM_WORLD, options);
  fabric.load(dir / "d.ddx", "", /*verify=*/true);
  test_rma(fabric, index);
  test_threads(fabric, index);
  test_collective(fabric, index, 2);
  test_bad_input(fabric);
  // Every rank on one node, direct_on_node: still no window, this rank's rows by memcpy and the
  // others' over the network.
  options.direct_on_node = true;
  Store shared = make_store(MPI_COMM_WORLD, options);
  shared.load(dir / "d.ddx");
  test_rma(shared, index);
#endif
}

void run(const fs::path& dir) {
  const auto index = Index::open(dir / "d.ddx");
  // Shards in a shared window read by memcpy (all ranks here share a node), then in a plain
  // window read with MPI_Get.
  for (const bool direct : {true, false}) {
    Store store =
        make_store(MPI_COMM_WORLD, {.max_round_bytes = 8 << 10, .direct_on_node = direct});
    store.load(dir / "d.ddx", "", /*verify=*/true);
    CHECK(store.size() == g_size && store.rank() == g_rank);
    test_rma(store, index);
    test_collective(store, index, 6);
    test_bad_input(store);
    if (direct) {
      test_threads(store, index);
      test_failed_load(store, dir);
    }
  }
  // Default rounds (one round per call here), and rounds smaller than one 3 KB row.
  for (const uint64_t cap : {uint64_t{4} << 20, uint64_t{1000}}) {
    Store other = make_store(MPI_COMM_WORLD, {.max_round_bytes = cap});
    other.load(dir / "d.ddx");
    test_collective(other, index, 2);
  }
  test_mem_limit(dir, index);
  run_fabric(dir);
}

/// The reason no built GPU runtime has a device, or empty when one has.
std::string no_gpu_reason() {
  std::string why = "built without CUDA and HIP";
  for (const auto& r : gpu_info()) {
    if (r.devices > 0) return {};
    why = std::string(memory_kind_name(r.kind)) + ": " + r.reason;
  }
  return why;
}

}  // namespace

/// Without arguments: the embedded Store's checks. With --gpu (label hardware): only the
/// device-destination checks, skipped (exit 77) before MPI_Init where there is no GPU. With
/// --fabric: only the libfabric Store's checks, under MPI_THREAD_MULTIPLE (what mpi4py asks
/// for), for a job whose MPI has no one-sided support; skipped (exit 77) without libfabric.
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--gpu") {
    if (const auto why = no_gpu_reason(); !why.empty()) {
      std::printf("skipped: no GPU (%s)\n", why.c_str());
      return 77;
    }
  }
  if (mode == "--fabric" && !DDSTAGE_HAVE_FABRIC) {
    std::printf("skipped: built without libfabric\n");
    return 77;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, mode == "--fabric" ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
                  &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const fs::path dir = shared_dir();
  try {
    if (g_rank == 0) {
      write_dataset(dir, "d");
      write_dataset(dir, "b", samples * 3 / 4);
      fs::remove(dir / "b-src" / "x2.bin");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (mode == "--gpu") {
      test_gpu(dir);
    } else if (mode == "--fabric") {
      CHECK(provided == MPI_THREAD_MULTIPLE);
      run_fabric(dir);
    } else {
      run(dir);
    }
  } catch (const std::exception& e) {
    // Another rank may be waiting in a collective: end the whole job rather than hang.
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", g_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int counts[2] = {g_passed, g_failed}, total[2] = {};
  MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    fs::remove_all(dir);
    std::printf("%d ranks: %d passed, %d failed\n", g_size, total[0], total[1]);
  }
  int failed = 0;
  MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
