#include "support/mpi_job.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "ddstage/error.hpp"

namespace ddstage::cli {

MpiJob::MpiJob(int* argc, char*** argv) {
  int initialised = 0;
  int level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&level);
  } else {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS) {
      throw Error(ErrorKind::runtime, "MPI_Init_thread failed");
    }
    m_owns = true;
  }
  m_multiple = level >= MPI_THREAD_MULTIPLE;
  MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m_size);
}

MpiJob::~MpiJob() {
  if (m_owns) MPI_Finalize();
}

void MpiJob::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

void MpiJob::barrier_gently() const {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string MpiJob::broadcast(std::string text, int root) const {
  int len = static_cast<int>(text.size());
  MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD);
  text.resize(static_cast<std::size_t>(len));
  MPI_Bcast(text.data(), len, MPI_CHAR, root, MPI_COMM_WORLD);
  return text;
}

std::string MpiJob::broadcast_outcome(const std::function<std::string()>& make, int root) const {
  // The first byte tells the others what came: A(nswer), U(sage error) or R(un-time error).
  std::string outcome;
  std::exception_ptr failure;
  if (m_rank == root) {
    try {
      outcome = "A" + make();
    } catch (const Error& e) {
      failure = std::current_exception();
      outcome = (e.kind() == ErrorKind::usage ? "U" : "R") + std::string(e.what());
    } catch (const std::exception& e) {
      failure = std::current_exception();
      outcome = "R" + std::string(e.what());
    } catch (...) {
      failure = std::current_exception();
      outcome = "Ran exception that is not a std::exception";
    }
  }
  outcome = broadcast(std::move(outcome), root);
  if (failure) std::rethrow_exception(failure);
  if (outcome[0] != 'A') {
    throw Error(outcome[0] == 'U' ? ErrorKind::usage : ErrorKind::runtime,
                "rank " + std::to_string(root) + ": " + outcome.substr(1));
  }
  return outcome.substr(1);
}

void MpiJob::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace ddstage::cli
