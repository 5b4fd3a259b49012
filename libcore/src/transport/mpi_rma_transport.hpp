// The `mpi` transport: MPI RMA passive-target gets from the embedded store's window.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/transport.hpp"

namespace ddstage::detail {

/// Reads rows from every rank's part of one MPI window, which the Store keeps in a
/// lock_all epoch. A rank whose region this process addresses directly (its own; every rank's
/// in a shared window) is read with memcpy; the others with MPI_Get, completed by one flush per
/// batch in wait(). Per thread like every transport; several threads reading need
/// MPI_THREAD_MULTIPLE.
class MpiRmaTransport final : public Transport {
 public:
  /// direct[rank]: that rank's region in this address space, or null to use MPI_Get on win.
  MpiRmaTransport(MPI_Win win, std::vector<const std::byte*> direct);

  std::string_view name() const noexcept override { return "mpi"; }
  void post(std::span<const ReadOp> reads) override;
  void wait() override;
  void quiesce() noexcept override;

 private:
  void get(const ReadOp& op);
  /// Completes every get of the batch: one flush per touched rank or one flush_all.
  void flush();

  MPI_Win m_win;
  std::vector<const std::byte*> m_direct;  // per rank
  std::vector<uint8_t> m_is_touched;       // per rank; all zero between batches
  std::vector<int> m_touched;              // ranks with gets in flight
};

}  // namespace ddstage::detail
