#include "mpi/mpi_window.hpp"

#include <utility>

#include <spdlog/spdlog.h>

#include "mpi/mpi_comm.hpp"

namespace ddstage::detail {

MpiWindow MpiWindow::allocate(uint64_t bytes, MPI_Comm comm) {
  MpiWindow w;
  void* base = nullptr;
  mpi_check(MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, comm, &base, &w.m_win),
            "MPI_Win_allocate");
  w.adopt(base, bytes);
  return w;
}

MpiWindow MpiWindow::allocate_shared(uint64_t bytes, MPI_Comm comm) {
  MpiWindow w;
  void* base = nullptr;
  // Each rank's region on its own pages (first touched by the rank that fills it, so on its
  // NUMA node) rather than one contiguous block.
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  const int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, comm, &base, &w.m_win);
  MPI_Info_free(&info);
  mpi_check(rc, "MPI_Win_allocate_shared");
  w.adopt(base, bytes);
  return w;
}

void MpiWindow::adopt(void* base, uint64_t bytes) {
  m_base = static_cast<std::byte*>(base);
  m_bytes = bytes;
  mpi_check(MPI_Win_set_errhandler(m_win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
}

std::vector<const std::byte*> MpiWindow::shared_bases(int ranks) const {
  std::vector<const std::byte*> bases(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    mpi_check(MPI_Win_shared_query(m_win, r, &bytes, &unit, &base), "MPI_Win_shared_query",
              {.rank = r});
    bases[static_cast<std::size_t>(r)] = static_cast<const std::byte*>(base);
  }
  return bases;
}

MpiWindow::MpiWindow(MpiWindow&& other) noexcept
    : m_win(std::exchange(other.m_win, MPI_WIN_NULL)),
      m_base(std::exchange(other.m_base, nullptr)),
      m_bytes(std::exchange(other.m_bytes, 0)),
      m_locked(std::exchange(other.m_locked, false)) {}

MpiWindow& MpiWindow::operator=(MpiWindow&& other) noexcept {
  if (this != &other) {
    release();
    m_win = std::exchange(other.m_win, MPI_WIN_NULL);
    m_base = std::exchange(other.m_base, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_locked = std::exchange(other.m_locked, false);
  }
  return *this;
}

MpiWindow::~MpiWindow() {
  release();
}

void MpiWindow::lock_all() {
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, m_win), "MPI_Win_lock_all");
  m_locked = true;
}

void MpiWindow::sync() {
  mpi_check(MPI_Win_sync(m_win), "MPI_Win_sync");
}

void MpiWindow::release() noexcept {
  if (m_win == MPI_WIN_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    spdlog::warn(
        "an MPI window outlived MPI_Finalize and was not freed: destroy the Store before "
        "finalizing");
    m_win = MPI_WIN_NULL;
    return;
  }
  if (m_locked && MPI_Win_unlock_all(m_win) != MPI_SUCCESS)
    spdlog::warn("MPI_Win_unlock_all failed");
  if (MPI_Win_free(&m_win) != MPI_SUCCESS) spdlog::warn("MPI_Win_free failed");
  m_win = MPI_WIN_NULL;
  m_locked = false;
}

}  // namespace ddstage::detail
