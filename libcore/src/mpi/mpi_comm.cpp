#include "mpi_comm.hpp"

#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"

namespace ddstage::detail {

void mpi_check(int rc, const char* call, ErrorContext context) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ErrorKind::runtime,
              std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(len)),
              std::move(context));
}

MpiCommDup::MpiCommDup(MPI_Comm comm) {
  mpi_check(MPI_Comm_dup(comm, &m_comm), "MPI_Comm_dup");
  mpi_check(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

MpiCommDup::~MpiCommDup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    spdlog::warn("a communicator outlived MPI_Finalize and was not freed");
  } else if (MPI_Comm_free(&m_comm) != MPI_SUCCESS) {
    spdlog::warn("MPI_Comm_free failed");
  }
}

namespace {

/// Waits for a non-blocking collective without spinning: idle store ranks sleep between tests.
void wait_gently(MPI_Request& request) {
  auto pause = std::chrono::microseconds(50);
  for (int done = 0;;) {
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace

std::string bcast_string(const std::string& text, MPI_Comm comm, int root) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  uint64_t length = text.size();
  MPI_Request request;
  mpi_check(MPI_Ibcast(&length, 1, MPI_UINT64_T, root, comm, &request), "MPI_Ibcast");
  wait_gently(request);
  std::string out = rank == root ? text : std::string(length, '\0');
  mpi_check(MPI_Ibcast(out.data(), static_cast<int>(length), MPI_CHAR, root, comm, &request),
            "MPI_Ibcast");
  wait_gently(request);
  return out;
}

namespace {

/// Every rank's text on rank 0, or on every rank with `everywhere`.
std::vector<std::string> collect_strings(const std::string& text, MPI_Comm comm, bool everywhere) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(everywhere || rank == 0 ? size : 0);
  mpi_check(everywhere ? MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm)
                       : MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm),
            "MPI_Gather");
  std::vector<int> displs(lengths.size());
  int total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    displs[i] = total;
    total += lengths[i];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  mpi_check(everywhere ? MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                        displs.data(), MPI_CHAR, comm)
                       : MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                     displs.data(), MPI_CHAR, 0, comm),
            "MPI_Gatherv");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) out.push_back(all.substr(displs[i], lengths[i]));
  return out;
}

}  // namespace

std::vector<std::string> gather_strings(const std::string& text, MPI_Comm comm) {
  return collect_strings(text, comm, false);
}

std::vector<std::string> allgather_strings(const std::string& text, MPI_Comm comm) {
  return collect_strings(text, comm, true);
}

namespace {

/// One value reduced over ranks, waiting like bcast_string: a server's ranks wait here while
/// rank 0 may spend seconds (replacing an old store) before it joins.
template <class T>
T allreduce_gently(T mine, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  T out{};
  MPI_Request request;
  mpi_check(MPI_Iallreduce(&mine, &out, 1, type, op, comm, &request), "MPI_Iallreduce");
  wait_gently(request);
  return out;
}

}  // namespace

bool all_ok(bool ok, MPI_Comm comm) {
  return allreduce_gently(ok ? 1 : 0, MPI_INT, MPI_MIN, comm) == 1;
}

void barrier_gently(MPI_Comm comm) {
  MPI_Request request;
  mpi_check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
  wait_gently(request);
}

double max_over_ranks(double v, MPI_Comm comm) {
  return allreduce_gently(v, MPI_DOUBLE, MPI_MAX, comm);
}

}  // namespace ddstage::detail
