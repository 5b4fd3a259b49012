#include "mpi_session.hpp"

#include <cstdlib>
#include <utility>

#include <spdlog/spdlog.h>

#include "mpi_comm.hpp"

namespace ddstage::detail {

MpiSession::Init::Init(int* argc, char*** argv, int thread_level) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&level);
  } else {
    mpi_check(MPI_Init_thread(argc, argv, thread_level, &level), "MPI_Init_thread");
    owns = true;
  }
}

MpiSession::Init::~Init() {
  if (owns && MPI_Finalize() != MPI_SUCCESS) spdlog::warn("MPI_Finalize failed");
}

MpiSession::MpiSession(int* argc, char*** argv, int thread_level)
    : m_init(argc, argv, thread_level) {
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m_size);
}

void MpiSession::finalize() {
  m_finalized = true;
  if (!std::exchange(m_init.owns, false)) return;
  mpi_check(MPI_Finalize(), "MPI_Finalize");
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace ddstage::detail
