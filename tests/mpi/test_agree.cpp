// agree() under a real mpiexec (ctest runs 3 ranks): a failure on one rank reaches every rank as
// the same class of error, naming that rank; the lowest failing rank wins; no failure costs
// nothing but returning. Exit code: 0 when every check passed on this rank.
#include <mpi.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <string>

#include "ddstage/error.hpp"
#include "mpi/mpi_agree.hpp"
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
  if (g_failed == 0 && g_rank == 0)
    std::printf("agree: all checks passed on every rank that printed nothing\n");
  return g_failed == 0 ? 0 : 1;
}
