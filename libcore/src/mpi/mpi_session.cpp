#include "mpi_session.hpp"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "mpi_comm.hpp"

namespace ddstage::detail {

MpiSession::MpiSession(int* argc, char*** argv, int thread_level) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&m_level);
  } else {
    mpi_check(MPI_Init_thread(argc, argv, thread_level, &m_level), "MPI_Init_thread");
    m_owns = true;
  }
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m_size);
}

MpiSession::~MpiSession() {
  if (m_owns && MPI_Finalize() != MPI_SUCCESS) spdlog::warn("MPI_Finalize failed");
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace ddstage::detail
