// MPI for the benches that run in an MPI job (bench store embedded, bench fabric-raw): one
// process (an MPI singleton) or every rank of an mpiexec/srun job. Built only with MPI.
#pragma once

#include <functional>
#include <string>

namespace ddstage::cli {

/// MPI_Init_thread(MPI_THREAD_MULTIPLE, for readers in several threads) unless MPI runs
/// already; MPI_Finalize of what it initialised. Communicates over MPI_COMM_WORLD.
class MpiJob {
 public:
  MpiJob(int* argc, char*** argv);
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;
  ~MpiJob();

  int rank() const noexcept { return m_rank; }
  int size() const noexcept { return m_size; }
  /// Whether several threads may make MPI calls at once.
  bool multiple() const noexcept { return m_multiple; }

  void barrier() const;
  /// A barrier that sleeps between tests: a rank that only waits leaves the cores to the
  /// ranks measuring (OpenMPI's blocking calls busy-poll).
  void barrier_gently() const;
  /// root's text, on every rank.
  std::string broadcast(std::string text, int root) const;
  /// What `make` returns on root, on every rank; if it throws there, every rank throws: root
  /// its own exception, the others an Error of its kind (runtime for anything not a
  /// ddstage::Error) with root's message. For steps only root takes, so that no rank waits
  /// for a broadcast root never reaches.
  std::string broadcast_outcome(const std::function<std::string()>& make, int root) const;
  /// Ends every rank of the job with this exit code (a rank failing alone would leave the
  /// others waiting).
  [[noreturn]] void abort(int code) const;

 private:
  bool m_owns = false;
  bool m_multiple = false;
  int m_rank = 0;
  int m_size = 1;
};

}  // namespace ddstage::cli
