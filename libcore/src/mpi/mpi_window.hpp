// RAII owner of an MPI window whose memory MPI allocates: the embedded store's shard region.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ddstage::detail {

/// Owns an MPI_Win made by MPI_Win_allocate (so MPI may place the memory where same-node
/// peers read it with plain copies) and its passive-target access epoch. Move-only. Creation
/// and destruction are collective over the window's communicator: every rank must create and
/// destroy its windows in the same order.
class MpiWindow {
 public:
  MpiWindow() = default;
  /// MPI_Win_allocate of `bytes` (may be 0) on every rank of comm, displacement unit 1; errors
  /// on the window come back as codes (exceptions), not aborts.
  static MpiWindow allocate(uint64_t bytes, MPI_Comm comm);
  /// MPI_Win_allocate_shared: the same, for a communicator within one node; every rank can
  /// then address every region directly (shared_bases).
  static MpiWindow allocate_shared(uint64_t bytes, MPI_Comm comm);
  MpiWindow(MpiWindow&& other) noexcept;
  MpiWindow& operator=(MpiWindow&& other) noexcept;
  MpiWindow(const MpiWindow&) = delete;
  MpiWindow& operator=(const MpiWindow&) = delete;
  /// Ends the epoch and frees the window; logs failures, never throws. Skipped (with a
  /// warning) after MPI_Finalize, when no MPI call is allowed any more.
  ~MpiWindow();

  /// Opens one shared access epoch to every rank (MPI_Win_lock_all, MPI_MODE_NOCHECK: nobody
  /// takes exclusive locks, the region is read-only once loaded). Held until destruction.
  void lock_all();
  /// MPI_Win_sync (inside the epoch): orders this process's stores to its region and the
  /// loads other ranks make directly (shared windows) around a collective.
  void sync();
  MPI_Win get() const noexcept { return m_win; }
  /// This rank's part of the window.
  std::span<std::byte> region() const noexcept { return {m_base, m_bytes}; }
  /// Every rank's region in this process's address space (MPI_Win_shared_query): only for
  /// windows made by allocate_shared.
  std::vector<const std::byte*> shared_bases(int ranks) const;

 private:
  void release() noexcept;
  void adopt(void* base, uint64_t bytes);

  MPI_Win m_win = MPI_WIN_NULL;
  std::byte* m_base = nullptr;
  std::size_t m_bytes = 0;
  bool m_locked = false;
};

}  // namespace ddstage::detail
