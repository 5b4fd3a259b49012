// How a batch reader moves rows out of the ranks' shard regions: the interface every transport
// (shm, mpi, fabric) implements, and the guard that keeps a batch's reads from outliving it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "ddstage/error.hpp"

namespace ddstage::detail {

/// One read: `bytes` bytes at `offset` in target `target`'s region, into dest. A target is one
/// region of the transport's targets: a rank's shard in an embedded store, one region (of
/// possibly several per rank, copies included) in a served one.
struct ReadOp {
  uint64_t offset;
  uint64_t bytes;
  std::byte* dest;
  int target;
};

/// A read that a transport could not complete. `may_be_withdrawn`: the failure is one that the
/// target closing its region (a replace or unload on the server) can also cause, so the reader
/// should ask the store what happened before reporting it as it stands.
class TransportError : public Error {
 public:
  TransportError(const std::string& what, ErrorContext context, bool may_be_withdrawn)
      : Error(ErrorKind::runtime, what, std::move(context)), m_may_be_withdrawn(may_be_withdrawn) {}
  bool may_be_withdrawn() const noexcept { return m_may_be_withdrawn; }

 private:
  bool m_may_be_withdrawn;
};

/// Moves bytes from the ranks' exposed shard regions into the caller's memory. Shaped like
/// one-sided RDMA so that libfabric (fi_read) and MPI RMA (MPI_Get) fit the same calls: the
/// regions are registered when the transport is made, a batch posts many reads at once, and
/// one wait collects every completion. Calls are per batch, never per row. Each reader owns
/// its transports (endpoint, completion queue): nothing here is shared between threads.
class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  /// The registry's name: "shm", "mpi", "fabric".
  virtual std::string_view name() const noexcept = 0;
  /// Starts reads, all aimed at ranks this transport reaches; offsets and lengths lie inside
  /// the regions (the caller checked). A transport may complete them right here.
  virtual void post(std::span<const ReadOp> reads) = 0;
  /// Returns once every posted read has landed; an Error naming the rank when one cannot
  /// (after which nothing posted writes into a destination any more: see quiesce).
  virtual void wait() = 0;
  /// After a post or wait threw, or when the caller gives up on a batch: returns only once no
  /// read posted so far can write into its destination any more (completed, cancelled and
  /// reaped, or its endpoint closed). Never throws; a no-op when nothing is in flight.
  virtual void quiesce() noexcept = 0;
  /// Between batches: the caller freed a destination buffer, so nothing cached for its
  /// addresses (a memory registration) may serve memory mapped there next.
  virtual void forget_destinations() noexcept {}
  /// From the next post on: network reads that make no progress for `timeout` fail, the error
  /// naming `setting` as the limit. A reader that has another copy to go to waits less than
  /// read_timeout (failover_timeout); copies complete at once and ignore it.
  virtual void limit_silence(std::chrono::milliseconds /*timeout*/,
                             std::string_view /*setting*/) noexcept {}
};

/// Owns the reads of one batch on one transport: every way out of the batch (return or
/// throw) passes through it, so the caller's buffer is never released with reads still
/// aimed at it. complete() waits for them; the destructor quiesces what was not completed.
class InFlight {
 public:
  explicit InFlight(Transport& transport) noexcept : m_transport(&transport) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    if (m_posted) m_transport->quiesce();
  }

  void post(std::span<const ReadOp> reads) {
    if (reads.empty()) return;
    m_posted = true;
    m_transport->post(reads);
  }
  /// Waits for every read posted through this guard; throws what the transport throws.
  void complete() {
    if (!m_posted) return;
    m_transport->wait();
    m_posted = false;
  }

 private:
  Transport* m_transport;
  bool m_posted = false;
};

}  // namespace ddstage::detail
