// The one owner of MPI's life in a ddstage process (the store server, the CLI's MPI benches).
#pragma once

#include <mpi.h>

namespace ddstage::detail {

/// MPI_Init_thread at the thread level the caller needs, unless MPI runs already (an app's or
/// a test's: then its level stays); MPI_Finalize on destruction of what it initialised. Errors
/// on its communicator come back as codes (mpi_check makes them exceptions), never abort the job.
class MpiSession {
 public:
  /// thread_level: MPI_THREAD_FUNNELED when only the main thread calls MPI, MPI_THREAD_MULTIPLE
  /// for readers in several threads. Error when MPI_Init_thread fails.
  MpiSession(int* argc, char*** argv, int thread_level);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  /// MPI_COMM_WORLD.
  MPI_Comm comm() const noexcept { return MPI_COMM_WORLD; }
  int rank() const noexcept { return m_rank; }
  int size() const noexcept { return m_size; }
  /// Whether several threads may make MPI calls at once (the level MPI provides, not the one
  /// asked for).
  bool multiple() const noexcept { return m_init.level >= MPI_THREAD_MULTIPLE; }
  /// Collective: MPI_Finalize now, when this session initialised MPI (an app's MPI is left
  /// running, unused). From here on nothing may call MPI; rank() and size() stay valid. For the
  /// store server, which needs MPI only to start: once finalised, a rank's death is no MPI
  /// error for the others.
  void finalize();
  bool finalized() const noexcept { return m_finalized; }
  /// Ends every rank of the job with this exit code: for a rank failing alone, which would
  /// leave the others waiting in their next collective.
  [[noreturn]] void abort(int code) const;

 private:
  /// MPI's life apart from the session's set-up: a member, so that MPI_Finalize also runs when
  /// a step after MPI_Init_thread throws out of the session's constructor.
  struct Init {
    Init(int* argc, char*** argv, int thread_level);
    Init(const Init&) = delete;
    Init& operator=(const Init&) = delete;
    ~Init();

    bool owns = false;
    int level = MPI_THREAD_SINGLE;
  };

  Init m_init;
  bool m_finalized = false;
  int m_rank = 0;
  int m_size = 1;
};

}  // namespace ddstage::detail
