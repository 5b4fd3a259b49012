// The few MPI collectives ddstage needs, with MPI kept out of public headers.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddstage/error.hpp"

namespace ddstage::detail {

/// Owns a duplicate of an app's communicator (errors returned as codes), so that a library's
/// collectives and messages never match the app's. Collective to create and to free.
class MpiCommDup {
 public:
  explicit MpiCommDup(MPI_Comm comm);
  MpiCommDup(const MpiCommDup&) = delete;
  MpiCommDup& operator=(const MpiCommDup&) = delete;
  /// MPI_Comm_free unless MPI is already finalized; logs failures, never throws.
  ~MpiCommDup();

  MPI_Comm get() const noexcept { return m_comm; }

 private:
  MPI_Comm m_comm = MPI_COMM_NULL;
};

/// root's text to every rank. The others wait with MPI_Ibcast + a short sleep between tests:
/// an idle server rank must not spin a core (OpenMPI's blocking calls busy-poll).
std::string bcast_string(const std::string& text, MPI_Comm comm, int root = 0);
/// Every rank's text, on rank 0 (empty vector elsewhere).
std::vector<std::string> gather_strings(const std::string& text, MPI_Comm comm);
/// Every rank's text, on every rank.
std::vector<std::string> allgather_strings(const std::string& text, MPI_Comm comm);
/// True on every rank if `ok` is true on every rank. Waits gently, like bcast_string.
bool all_ok(bool ok, MPI_Comm comm);
/// Maximum of v over ranks, on every rank. Waits gently, like bcast_string.
double max_over_ranks(double v, MPI_Comm comm);
/// A barrier that sleeps between tests, like bcast_string: a rank that only waits leaves the
/// cores to the ranks at work.
void barrier_gently(MPI_Comm comm);

/// Throws Error naming the MPI call and its error string (and context, e.g. the target rank)
/// when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* call, ErrorContext context = {});

}  // namespace ddstage::detail
