// The `fabric` transport: one-sided fi_read from server ranks' registered regions.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rdma/fi_rma.h>

#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_handles.hpp"
#include "fabric/fabric_mr_cache.hpp"
#include "fabric/fabric_options.hpp"
#include "fabric/fabric_peer.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// A read the provider completed with an error: its generic code alone does not tell a refused
/// key from a lost connection (tcp;ofi_rxm 1.17 cancels both), the provider's own code does.
class FabricReadError : public FabricError {
 public:
  FabricReadError(const std::string& call, const std::string& provider,
                  const fi_cq_err_entry& entry, ErrorContext context, const std::string& detail)
      : FabricError(call, provider, -entry.err, std::move(context), detail, entry.prov_errno),
        m_provider_code(entry.prov_errno) {}
  /// prov_errno: an errno for tcp and shm.
  int provider_code() const noexcept { return m_provider_code; }

 private:
  int m_provider_code;
};

/// Reads for one Reader (one thread) over its own endpoint and queue. Reads larger than the
/// provider's max_msg_size (or options.max_read_bytes) are split; up to options.window reads
/// and options.max_bytes_in_flight bytes are in flight, posted with FI_MORE on all but the last of
/// a burst; -FI_EAGAIN (rxm connects lazily) is met by progressing the queue and retrying. wait()
/// reaps every completion. A read that fails is an Error naming its rank, host and the provider's
/// text; when no read completes for options.read_timeout the batch fails naming the ranks still
/// outstanding, the endpoint is replaced (abandoning those reads) and the transport stays usable
/// for the other ranks, unless the process already left options.max_abandoned_endpoints endpoints
/// open (see abandons_with_reads_in_flight): then every later batch fails saying so. Every call
/// that throws, and quiesce(), leaves no read in flight: cancelled and reaped, or its endpoint
/// closed.
class FabricTransport final : public Transport {
 public:
  /// remotes[rank]: that rank's server and region; a rank with an empty address is not read.
  /// Every server must run the same provider; this reader opens it in options.domain.
  FabricTransport(const FabricOptions& options, std::vector<FabricRemote> remotes);
  ~FabricTransport() override;

  std::string_view name() const noexcept override { return "fabric"; }
  void post(std::span<const ReadOp> reads) override;
  void wait() override;
  void quiesce() noexcept override;
  /// Endpoints this process has left open so far; each holds its sockets and memory until exit.
  static std::size_t abandoned_endpoints() noexcept;
  /// The provider the reads go over ("tcp;ofi_rxm").
  const std::string& provider() const noexcept { return m_provider; }
  /// Between batches: the caller freed a destination buffer (a reader's bounce buffer that
  /// grew), so a registration cached for its addresses must not serve memory mapped there next.
  void limit_silence(std::chrono::milliseconds timeout,
                     std::string_view setting) noexcept override {
    m_silence = timeout;
    m_silence_setting = setting;
  }
  void forget_destinations() noexcept override {
    if (m_local) m_local->clear();
  }

 private:
  /// One read; `context` first, so the completion's op_context is the slot itself.
  struct Slot {
    fi_context2 context;
    iovec iov;
    void* desc;
    fi_rma_iov rma;
    int rank;
    bool busy;  // in flight
  };

  void open_endpoint();
  /// Abandons every read in flight with the endpoint and opens a fresh one.
  void reopen_endpoint() noexcept;
  /// Closes the endpoint, and its registrations before it; one with reads in flight that the
  /// provider cannot close safely is abandoned (left open, never progressed) instead.
  void close_endpoint() noexcept;
  /// Throws once the process holds max_abandoned_endpoints: leaking one per time-out against a
  /// lost rank would have no bound in a long-lived reader.
  void check_abandoned() const;
  void post_all(std::span<const ReadOp> reads);
  void* local_desc(std::span<const ReadOp> reads, const ReadOp& op);
  /// One fi_read's worth of a ReadOp.
  struct Chunk {
    int rank;
    uint64_t offset;
    uint64_t bytes;
    std::byte* dest;
    void* desc;
  };
  /// Posts `chunk` once the window and byte cap allow; `next`: the chunk that follows in this
  /// burst, if any.
  void post_one(const Chunk& chunk, const Chunk* next);
  bool has_room(uint64_t bytes) const noexcept;
  /// Reaps completions; with `block`, until at least one landed. Throws on time-out and when
  /// the queue fails (after closing the endpoint: nothing of the batch stays in flight).
  void progress(bool block);
  /// One fi_cq_read: releases what completed and returns how many reads did (0: look again),
  /// or the queue's code (-FI_EAGAIN: nothing yet). With `keep_error`, the first failed read
  /// becomes m_error.
  ssize_t reap(bool keep_error) noexcept;
  void note_error(const fi_cq_err_entry& entry, const Slot& slot) noexcept;
  /// Cancels every read in flight and reaps the queue until none is left; false when they do
  /// not all come back within quiesce_wait (the caller then closes the endpoint).
  bool drain() noexcept;
  /// Between empty polls of a blocking progress() or refused posts: returns at once while the
  /// wait is young, sleeps once it has lasted.
  void pause_while_idle() const;
  void release(Slot* slot) noexcept;
  void check_deadline();
  [[noreturn]] void time_out();
  std::size_t in_flight() const noexcept { return m_slots.size() - m_free.size(); }
  /// "rank R on HOST" of the rank holding target's region.
  std::string where(int target) const;
  int rank_of(int target) const;

  FabricOptions m_options;
  std::vector<FabricRemote> m_remotes;
  std::vector<std::string> m_addresses;  // raw, per rank; empty: not reached
  std::string m_provider;
  InfoPtr m_info;
  std::optional<FabricEndpoint> m_endpoint;
  std::vector<fi_addr_t> m_peers;  // per target, in the current endpoint's address vector
  uint64_t m_max_read = 0;
  std::vector<Slot> m_slots;
  /// How long reads may make no progress, and the setting that says so (limit_silence).
  std::chrono::milliseconds m_silence;
  std::string_view m_silence_setting = "read_timeout";
  std::vector<uint32_t> m_free;
  uint64_t m_bytes_in_flight = 0;
  std::optional<FabricMrCache> m_local;    // only when the provider needs FI_MR_LOCAL
  std::optional<FabricReadError> m_error;  // first failed read of this batch
  bool m_deferred = false;  // the last read went with FI_MORE: the provider may hold it back
  std::chrono::steady_clock::time_point m_last_progress;
};

/// Whether an endpoint opened from `info` that still has reads in flight is left open rather
/// than closed under libfabric `version` (fi_version()): tcp and net before 1.18 crash closing
/// a read cut off halfway, and abandoning is safe only while nothing drives the endpoint, that
/// is with manual data progress; with automatic progress a provider thread could still land
/// the reads in a buffer the caller freed, so such an endpoint is closed, bug or not.
bool abandons_with_reads_in_flight(const fi_info& info, uint32_t version) noexcept;

}  // namespace ddstage::detail
