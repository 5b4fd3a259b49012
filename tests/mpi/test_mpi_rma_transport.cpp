// MpiRmaTransport under a real mpiexec (2 ranks, OpenMPI's osc/pt2pt over tcp on loopback, where
// a get lands only when the origin flushes): an MPI_Get that fails after others were started
// must not let those land in the caller's buffer after the error left post().
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "ddstage/error.hpp"
#include "mpi/mpi_window.hpp"
#include "transport/mpi_rma_transport.hpp"

using namespace ddstage;
using namespace ddstage::detail;

namespace {

constexpr std::size_t region_bytes = 1 << 20;
constexpr std::byte canary{0xa5};
int g_failed = 0;

void check(bool ok, const char* what) {
  if (ok) return;
  ++g_failed;
  std::fprintf(stderr, "rank 0: check failed: %s\n", what);
}

std::byte pattern(std::size_t i) {
  return static_cast<std::byte>((i * 131 + 7) & 0xff);
}

/// Rank 0 reads rank 1's region in 16 gets, then one whose displacement MPI refuses.
void read_with_a_failing_get(const MpiWindow& window) {
  MpiRmaTransport t(window.get(), {nullptr, nullptr});
  std::vector<std::byte> dest(region_bytes);
  std::vector<ReadOp> ops;
  const std::size_t piece = region_bytes / 16;
  for (std::size_t i = 0; i < 16; ++i)
    ops.push_back({i * piece, piece, dest.data() + i * piece, 1});
  std::byte bad[8];
  ops.push_back({uint64_t{1} << 63, sizeof bad, bad, 1});  // a negative MPI_Aint displacement
  try {
    t.post(ops);
    check(false, "a get at a negative displacement was accepted");
  } catch (const Error& e) {
    check(std::string(e.what()).find("MPI_Get") != std::string::npos, "the error names MPI_Get");
  }
  bool landed = true;
  for (std::size_t i = 0; i < dest.size(); ++i) landed = landed && dest[i] == pattern(i);
  check(landed, "the gets before the failing one landed before post() threw");
  t.quiesce();
  std::fill(dest.begin(), dest.end(), canary);
  // Another batch and a flush of every rank: a get still outstanding would land now.
  std::vector<std::byte> other(piece);
  const ReadOp again{0, piece, other.data(), 1};
  t.post({&again, 1});
  t.wait();
  MPI_Win_flush_all(window.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  check(std::all_of(dest.begin(), dest.end(), [](std::byte b) { return b == canary; }),
        "nothing wrote into the destination after the batch failed");
  bool read = true;
  for (std::size_t i = 0; i < other.size(); ++i) read = read && other[i] == pattern(i);
  check(read, "the transport still reads after the failure");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "run with 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  {
    MpiWindow window = MpiWindow::allocate(region_bytes, MPI_COMM_WORLD);
    const auto region = window.region();
    for (std::size_t i = 0; i < region.size(); ++i) region[i] = pattern(i);
    MPI_Barrier(MPI_COMM_WORLD);
    window.lock_all();
    // Rank 1 waits in the barrier, which progresses its side of the gets (pt2pt needs it).
    if (rank == 0) read_with_a_failing_get(window);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Bcast(&g_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s\n", g_failed ? "FAILED" : "passed");
  MPI_Finalize();
  return g_failed ? 1 : 0;
}
