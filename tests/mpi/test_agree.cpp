// agree() under a real mpiexec (ctest runs 3 ranks): a failure on one rank reaches every rank as
// the same class of error, naming that rank; the lowest failing rank wins; no failure costs
// nothing but returning; a rank waiting for the others sleeps rather than spins. Exit code: 0 when
// every check passed on this rank.
#include <mpi.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <thread>

#include "ddstage/error.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"
#include "mpi/mpi_session.hpp"

using namespace ddstage;

namespace {

int g_rank = 0;
int g_failed = 0;

void check(bool ok, const char* what, int line) {
  if (ok) return;
  ++g_failed;
  std::fprintf(stderr, "rank %d: line %d: %s\n", g_rank, line, what);
}
#define CHECK(cond) check((cond), #cond, __LINE__)

/// Runs step on every rank, agrees, and returns what this rank caught (empty pointer: nothing).
std::exception_ptr agree_on(const std::function<void()>& step) {
  try {
    detail::agree(detail::caught(step), MPI_COMM_WORLD);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void no_failure_returns() {
  CHECK(!agree_on([] {}));
}

void index_error_keeps_its_class() {
  const auto p = agree_on([] {
    if (g_rank == 1) throw IndexError("index.bin is truncated", {.file = "d.ddx/index.bin"});
  });
  CHECK(p != nullptr);
  try {
    std::rethrow_exception(p);
  } catch (const IndexError& e) {
    const std::string what = e.what();
    if (g_rank == 1) {
      CHECK(what == "index.bin is truncated (file d.ddx/index.bin)");
    } else {
      CHECK(what.starts_with("rank 1 failed: index.bin is truncated"));
      CHECK(e.context().rank == 1);
    }
  } catch (...) {
    CHECK(!"not an IndexError");
  }
}

void lowest_failing_rank_wins() {
  const auto p = agree_on([] {
    if (g_rank == 2) throw UsageError("rank two's input");
    if (g_rank == 1) throw IoError("open x", ENOSPC);
  });
  try {
    std::rethrow_exception(p);
  } catch (const IoError& e) {
    CHECK(e.native_code() == ENOSPC);
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(g_rank == 1 || std::string(e.what()).starts_with("rank 1 failed: open x: "));
  } catch (...) {
    CHECK(!"not an IoError");
  }
}

void other_exceptions_become_runtime_errors() {
  const auto p = agree_on([] {
    if (g_rank == 0) throw std::bad_alloc();
  });
  try {
    std::rethrow_exception(p);
  } catch (const std::bad_alloc&) {
    CHECK(g_rank == 0);
  } catch (const Error& e) {
    CHECK(g_rank != 0 && e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).starts_with("rank 0 failed: std::bad_alloc"));
  }
}

void root_outcome_reaches_every_rank() {
  CHECK(detail::root_outcome([] { return std::string("from rank 2"); }, 2, MPI_COMM_WORLD) ==
        "from rank 2");
  try {
    detail::root_outcome([]() -> std::string { throw ChecksumError("bad bytes"); }, 2,
                         MPI_COMM_WORLD);
    CHECK(!"no exception");
  } catch (const ChecksumError& e) {
    CHECK(std::string(e.what()) == (g_rank == 2 ? "bad bytes" : "rank 2: bad bytes"));
  }
}

void unreadable_record_still_reaches_every_rank() {
  // Rank 2's record is one stray byte: rank 0 cannot decode it, and must still broadcast, or
  // ranks 1 and 2 would wait in the broadcast forever (here mpiexec ends the job when rank 0
  // dies of the uncaught exception).
  const auto first = detail::first_error_of_record(g_rank == 2 ? "x" : "", MPI_COMM_WORLD);
  CHECK(first.has_value());
  if (!first) return;
  CHECK(first->rank == 2);
  CHECK(first->error.type == detail::ErrorClass::error);
  CHECK(first->error.text.find("an unreadable failure record") != std::string::npos);
  CHECK(first->error.text.find("rank 2") != std::string::npos);
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void reductions_wait_gently() {
  // Server start-up: the other ranks wait in all_ok while rank 0 replaces an old store. A
  // blocking MPI_Allreduce busy-polls (OpenMPI), taking about the whole wait in CPU time.
  const auto waited = [](const std::function<void()>& reduce) {
    const double before = cpu_seconds();
    if (g_rank == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    reduce();
    return cpu_seconds() - before;
  };
  const double ok_cpu = waited([] { CHECK(detail::all_ok(g_rank != 1, MPI_COMM_WORLD) == false); });
  const double max_cpu =
      waited([] { CHECK(detail::max_over_ranks(g_rank * 1.5, MPI_COMM_WORLD) == 3.0); });
  if (g_rank == 0) return;
  if (ok_cpu > 0.2 || max_cpu > 0.2)
    std::fprintf(stderr, "rank %d: cpu %.3f s in all_ok, %.3f s in max_over_ranks\n", g_rank,
                 ok_cpu, max_cpu);
  CHECK(ok_cpu < 0.2);
  CHECK(max_cpu < 0.2);
}

}  // namespace

int main(int argc, char** argv) {
  const detail::MpiSession mpi(&argc, &argv, MPI_THREAD_FUNNELED);
  g_rank = mpi.rank();
  if (mpi.size() < 3) {
    std::fprintf(stderr, "run with 3 ranks or more\n");
    return 1;
  }
  no_failure_returns();
  index_error_keeps_its_class();
  lowest_failing_rank_wins();
  other_exceptions_become_runtime_errors();
  root_outcome_reaches_every_rank();
  unreadable_record_still_reaches_every_rank();
  reductions_wait_gently();
  if (g_failed == 0 && g_rank == 0)
    std::printf("agree: all checks passed on every rank that printed nothing\n");
  return g_failed == 0 ? 0 : 1;
}
