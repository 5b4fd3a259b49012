// How a Reader moves rows out of the ranks' shard regions: the interface every transport
// (local, shm; later mpi, fabric) implements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ddstage::detail {

/// One read: `bytes` bytes at `offset` in rank `rank`'s shard region, into dest.
struct ReadOp {
  uint64_t offset;
  uint64_t bytes;
  std::byte* dest;
  int rank;
};

/// Moves bytes from the ranks' exposed shard regions into the caller's memory. Shaped like
/// one-sided RDMA so that libfabric (fi_read) and MPI RMA (MPI_Get) fit the same calls: the
/// regions are registered when the transport is made, a batch posts many reads at once, and
/// one wait collects every completion. Calls are per batch, never per row. Each Reader owns
/// its transports (endpoint, completion queue): nothing here is shared between threads.
class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  /// "local", "shm", ...
  virtual std::string_view name() const noexcept = 0;
  /// Starts reads, all aimed at ranks this transport reaches; offsets and lengths lie inside
  /// the regions (the caller checked). A transport may complete them right here.
  virtual void post(std::span<const ReadOp> reads) = 0;
  /// Returns once every posted read has landed; an Error naming the rank when one cannot.
  virtual void wait() = 0;
};

}  // namespace ddstage::detail
