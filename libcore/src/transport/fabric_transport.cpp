#include "transport/fabric_transport.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include <spdlog/spdlog.h>

#include "batch_timer.hpp"
#include "fabric/fabric_provider.hpp"

namespace ddstage::detail {

FabricTransport::FabricTransport(const FabricOptions& options, std::vector<FabricRemote> remotes)
    : m_options(options),
      m_remotes(std::move(remotes)),
      m_slots(std::max<std::size_t>(options.window, 1)),
      m_silence(options.read_timeout) {
  m_free.reserve(m_slots.size());  // refilled by close_endpoint, which must not throw
  for (const FabricRemote& r : m_remotes) {
    m_addresses.push_back(from_hex(r.peer.address_hex));
    if (m_addresses.back().empty()) continue;
    if (m_provider.empty()) m_provider = r.peer.provider;
    if (r.peer.provider != m_provider) {
      throw UsageError("fabric servers run different providers: " + m_provider + " and " +
                       r.peer.provider);
    }
  }
  if (m_provider.empty()) throw std::logic_error("FabricTransport without any rank to read from");
  const auto reached = std::find_if(m_addresses.begin(), m_addresses.end(),
                                    [](const auto& a) { return !a.empty(); });
  m_info = find_provider(m_provider, m_options.domain, reached->size());
  m_max_read = m_info->ep_attr->max_msg_size;
  if (m_options.max_read_bytes) m_max_read = std::min(m_max_read, m_options.max_read_bytes);
  open_endpoint();
}

FabricTransport::~FabricTransport() {
  close_endpoint();
}

void FabricTransport::open_endpoint() {
  close_endpoint();
  check_abandoned();
  m_endpoint.emplace(*m_info);
  if (m_endpoint->mr_mode(FI_MR_LOCAL) && !m_local) m_local.emplace();
  m_peers.assign(m_addresses.size(), FI_ADDR_NOTAVAIL);
  // One address vector entry per endpoint, however many of its regions are targets.
  std::map<std::string, fi_addr_t> inserted;
  for (std::size_t t = 0; t < m_addresses.size(); ++t) {
    if (m_addresses[t].empty()) continue;
    auto [it, added] = inserted.try_emplace(m_addresses[t], FI_ADDR_NOTAVAIL);
    if (added) it->second = m_endpoint->insert_peer(m_addresses[t]);
    m_peers[t] = it->second;
  }
}

namespace {

/// Endpoints the provider would crash closing (see abandons_with_reads_in_flight): open, never
/// progressed, until the process ends. Never destroyed, not even at exit, since closing them is
/// the crash; reachable from a static, so LeakSanitizer does not take them for a leak.
struct Abandoned {
  std::mutex mutex;
  std::deque<FabricEndpoint> endpoints;
};

Abandoned& abandoned() {
  static auto* const all = new Abandoned;
  return *all;
}

}  // namespace

// Before libfabric 1.18, the tcp provider (and net, its successor) completes a read whose
// response was cut off halfway twice when the connection closes: once from the queue of reads
// awaiting a response, once as the response in progress, by then freed and without a context
// (ofiwg/libfabric#8656, #8660). ofi_rxm dereferences that context inside fi_close of the
// endpoint: a segfault. A lost link (packets dropped mid-response) is exactly that case.
bool abandons_with_reads_in_flight(const fi_info& info, uint32_t version) noexcept {
  const std::string_view provider =
      info.fabric_attr && info.fabric_attr->prov_name ? info.fabric_attr->prov_name : "";
  const std::string_view core = provider.substr(0, provider.find(';'));
  const bool crashes = version < FI_VERSION(1, 18) && (core == "tcp" || core == "net");
  return crashes && info.domain_attr && info.domain_attr->data_progress == FI_PROGRESS_MANUAL;
}

std::size_t FabricTransport::abandoned_endpoints() noexcept {
  std::lock_guard lock(abandoned().mutex);
  return abandoned().endpoints.size();
}

void FabricTransport::check_abandoned() const {
  if (const std::size_t n = abandoned_endpoints(); n >= m_options.max_abandoned_endpoints) {
    throw Error(ErrorKind::runtime,
                "too many fabric endpoints left open after time-outs against lost ranks (" +
                    std::to_string(n) + " in this process, provider " + m_provider +
                    "; libfabric < 1.18 tcp bug): restart the reading process");
  }
}

void FabricTransport::close_endpoint() noexcept {
  // Registrations belong to the endpoint's domain: closed before it.
  if (m_local) m_local->clear();
  if (m_endpoint && in_flight() > 0 &&
      abandons_with_reads_in_flight(m_endpoint->info(), fabric_api().version())) {
    // Nothing progresses an endpoint after this (data progress is manual), so its reads never
    // land in the caller's buffer; its sockets and memory are held until the process ends.
    std::lock_guard lock(abandoned().mutex);
    abandoned().endpoints.push_back(std::move(*m_endpoint));
    spdlog::debug(
        "fabric ({}): an endpoint with {} abandoned reads left open ({} in this process, libfabric "
        "{}.{})",
        m_provider, in_flight(), abandoned().endpoints.size(), FI_MAJOR(fabric_api().version()),
        FI_MINOR(fabric_api().version()));
  }
  m_endpoint.reset();
  // Whatever was in flight went with the endpoint.
  m_free.clear();
  for (uint32_t i = 0; i < m_slots.size(); ++i)
    m_free.push_back(static_cast<uint32_t>(m_slots.size() - 1 - i));
  for (Slot& slot : m_slots) slot.busy = false;
  m_bytes_in_flight = 0;
  m_deferred = false;
}

int FabricTransport::rank_of(int target) const {
  const int rank = m_remotes[static_cast<std::size_t>(target)].rank;
  return rank < 0 ? target : rank;
}

std::string FabricTransport::where(int target) const {
  const std::string& host = m_remotes[static_cast<std::size_t>(target)].host;
  return "rank " + std::to_string(rank_of(target)) + (host.empty() ? "" : " on " + host);
}

void FabricTransport::post(std::span<const ReadOp> reads) {
  if (!m_endpoint) open_endpoint();  // the last time-out failed to reopen it
  if (in_flight() == 0) m_last_progress = std::chrono::steady_clock::now();
  try {
    post_all(reads);
  } catch (...) {
    // Reads already posted would land in the caller's buffer after get_batch threw and the
    // caller freed it.
    quiesce();
    throw;
  }
}

void FabricTransport::post_all(std::span<const ReadOp> reads) {
  // Each chunk is posted once the next is known: whether FI_MORE may defer it depends on
  // whether the next can follow without waiting for completions.
  std::optional<Chunk> pending;
  for (const ReadOp& op : reads) {
    if (op.target < 0 || static_cast<std::size_t>(op.target) >= m_peers.size() ||
        m_peers[op.target] == FI_ADDR_NOTAVAIL) {
      throw std::logic_error("fabric read aimed at rank " + std::to_string(op.target) +
                             ", which this reader does not reach");
    }
    if (op.bytes == 0) continue;
    void* desc = local_desc(reads, op);
    for (uint64_t done = 0; done < op.bytes;) {
      const Chunk chunk{op.target, op.offset + done, std::min(op.bytes - done, m_max_read),
                        op.dest + done, desc};
      if (pending) post_one(*pending, &chunk);
      pending = chunk;
      done += chunk.bytes;
    }
  }
  if (pending) post_one(*pending, nullptr);
}

bool FabricTransport::has_room(uint64_t bytes) const noexcept {
  // A chunk larger than the byte cap still goes, alone.
  return !m_free.empty() &&
         (m_bytes_in_flight == 0 || m_bytes_in_flight + bytes <= m_options.max_bytes_in_flight);
}

void* FabricTransport::local_desc(std::span<const ReadOp> reads, const ReadOp& op) {
  if (!m_local) return nullptr;
  // One registration spanning the whole batch's destinations (the caller's buffer) when it can
  // be made; destinations scattered over unmapped gaps get one each.
  const std::byte* lo = op.dest;
  const std::byte* hi = op.dest + op.bytes;
  for (const ReadOp& r : reads) {
    if (!r.bytes) continue;
    lo = std::min<const std::byte*>(lo, r.dest);
    hi = std::max<const std::byte*>(hi, r.dest + r.bytes);
  }
  try {
    return m_local->desc(*m_endpoint, lo, hi);
  } catch (const FabricError&) {
    return m_local->desc(*m_endpoint, op.dest, op.dest + op.bytes);
  }
}

void FabricTransport::post_one(const Chunk& chunk, const Chunk* next) {
  if (!has_room(chunk.bytes)) {
    profile_mark(ProfileStage::post);
    while (!has_room(chunk.bytes)) progress(true);
    profile_mark(ProfileStage::queue_wait);
  }
  Slot& slot = m_slots[m_free.back()];
  m_free.pop_back();
  m_bytes_in_flight += chunk.bytes;
  slot.busy = true;
  const int rank = chunk.rank;
  const FabricRegionInfo& region = m_remotes[static_cast<std::size_t>(rank)].region;
  slot.rank = rank;
  slot.iov = {chunk.dest, chunk.bytes};
  slot.desc = chunk.desc;
  slot.rma = {region.base + chunk.offset, chunk.bytes, region.key};
  const fi_msg_rma msg{&slot.iov, &slot.desc, 1, m_peers[rank], &slot.rma, 1, &slot, 0};
  // Deferring is only safe while the next read will flush it: not when that one must first
  // wait on the queue (window or byte cap full), nor for the last of the burst.
  uint64_t flags = FI_COMPLETION | (next && has_room(next->bytes) ? FI_MORE : 0);
  for (;;) {
    const ssize_t rc = fi_readmsg(m_endpoint->ep(), &msg, flags);
    if (rc == 0) {
      m_deferred = (flags & FI_MORE) != 0;
      m_last_progress = std::chrono::steady_clock::now();
      return;
    }
    if (rc != -FI_EAGAIN) {
      release(&slot);
      // post() abandons the reads already posted (some may be held back by FI_MORE, so
      // waiting for them could end in a time-out that hides this error).
      throw FabricError("fi_readmsg to " + where(rank), m_provider, static_cast<int>(rc),
                        {.rank = rank_of(rank)});
    }
    // Reads we deferred with FI_MORE must go out before the queue can drain.
    flags &= ~FI_MORE;
    progress(false);
    // rxm connects lazily: against a hung server the first read is refused until read_timeout.
    pause_while_idle();
  }
}

void FabricTransport::release(Slot* slot) noexcept {
  slot->busy = false;
  m_bytes_in_flight -= slot->iov.iov_len;
  m_free.push_back(static_cast<uint32_t>(slot - m_slots.data()));
}

void FabricTransport::progress(bool block) {
  for (;;) {
    const ssize_t n = reap(true);
    if (n > 0) {
      m_last_progress = std::chrono::steady_clock::now();
      return;
    }
    if (n == 0) continue;
    if (n != -FI_EAGAIN) {
      // A queue that fails cannot be drained: closing the endpoint is what stops its reads.
      reopen_endpoint();
      throw FabricError("fi_cq_read", m_provider, static_cast<int>(n));
    }
    check_deadline();
    if (!block) return;
    pause_while_idle();
  }
}

ssize_t FabricTransport::reap(bool keep_error) noexcept {
  std::array<fi_cq_entry, 64> entries;
  const ssize_t n = fi_cq_read(m_endpoint->cq(), entries.data(), entries.size());
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) release(static_cast<Slot*>(entries[i].op_context));
    return n;
  }
  if (n != -FI_EAVAIL) return n;
  fi_cq_err_entry err{};
  if (fi_cq_readerr(m_endpoint->cq(), &err, 0) <= 0) return 0;
  auto* slot = static_cast<Slot*>(err.op_context);
  // shm 1.17 reports a dead peer as an entry tied to no read (and a negative code): the reads
  // to that peer stay outstanding and the deadline names them.
  if (!slot) {
    spdlog::debug("fabric ({}): completion error without a read: {}", m_provider,
                  fabric_strerror(std::abs(err.err)));
    return 0;
  }
  if (keep_error && !m_error) note_error(err, *slot);
  release(slot);
  return 1;
}

void FabricTransport::note_error(const fi_cq_err_entry& entry, const Slot& slot) noexcept {
  char text[256] = "";
  const char* detail =
      fi_cq_strerror(m_endpoint->cq(), entry.prov_errno, entry.err_data, text, sizeof text);
  m_error.emplace("fi_read from " + where(slot.rank), m_provider, entry,
                  ErrorContext{.rank = rank_of(slot.rank)}, detail ? detail : "");
}

void FabricTransport::pause_while_idle() const {
  // Not fi_cq_sread: shm and ofi_rxm progress only inside fi_cq_read calls, so a reader that
  // blocked in the kernel would stall the very reads it waits for. Instead: spin while reads
  // are young (on a live link they complete within microseconds, and a sleep would add its own
  // latency), then sleep a sixteenth of the time already waited (at most 1 ms), which costs a
  // late completion at most ~6% and keeps a reader waiting on a hung server off the CPU.
  // Spinning, it yields: a server thread that must run for the read to complete may share this
  // core (a store on the reader's node, more threads than cores), and without a yield it would
  // wait out the reader's time slice (milliseconds).
  constexpr auto spin = std::chrono::milliseconds(1);
  constexpr auto longest = std::chrono::milliseconds(1);
  const auto idle = std::chrono::steady_clock::now() - m_last_progress;
  if (idle < spin) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(idle / 16, longest));
}

void FabricTransport::check_deadline() {
  if (in_flight() > 0 && std::chrono::steady_clock::now() - m_last_progress > m_silence) time_out();
}

void FabricTransport::time_out() {
  // By rank: a rank's several regions (copies, repairs) are one server that made no progress.
  std::map<int, int> ranks;  // rank -> one of its targets
  for (const Slot& slot : m_slots) {
    if (slot.busy) ranks.emplace(rank_of(slot.rank), slot.rank);
  }
  std::string names;
  for (const auto& [rank, target] : ranks) names += (names.empty() ? "" : ", ") + where(target);
  const auto ms = m_silence.count();
  const std::string span =
      ms % 1000 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s";
  Error error(ErrorKind::runtime,
              "fabric reads from " + names + " made no progress for " + span + " (" +
                  std::string(m_silence_setting) + ", provider " + m_provider +
                  "): server dead or hung",
              {.rank = ranks.begin()->first});
  reopen_endpoint();
  throw error;
}

void FabricTransport::reopen_endpoint() noexcept {
  // Closing (or abandoning) the endpoint abandons the reads in flight: no provider writes into
  // the caller's buffer after that. A fresh one serves the other ranks; if it cannot be
  // opened, the next post retries.
  m_error.reset();
  try {
    open_endpoint();
  } catch (const std::exception&) {
    m_endpoint.reset();
  }
}

void FabricTransport::quiesce() noexcept {
  // A read that failed belongs to the batch given up on.
  m_error.reset();
  if (in_flight() == 0) return;
  // Reads held back by FI_MORE may never go out, so waiting for them is waiting for nothing.
  if (m_deferred || !drain()) {
    reopen_endpoint();
  } else if (m_local) {
    m_local->batch_done();
  }
}

bool FabricTransport::drain() noexcept {
  // Providers may refuse to cancel a read already on the wire (rxm and shm cancel only
  // receives): those complete or fail on their own, and the queue reports both.
  for (Slot& slot : m_slots) {
    if (slot.busy) fi_cancel(&m_endpoint->ep()->fid, &slot.context);
  }
  // A live peer answers within milliseconds; one that does not is left to closing the endpoint
  // rather than holding up the failure the caller is reporting.
  constexpr auto quiesce_wait = std::chrono::milliseconds(250);
  m_last_progress = std::chrono::steady_clock::now();
  const auto deadline =
      m_last_progress + std::min<std::chrono::milliseconds>(m_silence, quiesce_wait);
  while (in_flight() > 0) {
    const ssize_t n = reap(false);
    if (n > 0) {
      m_last_progress = std::chrono::steady_clock::now();
      continue;
    }
    if ((n < 0 && n != -FI_EAGAIN) || std::chrono::steady_clock::now() > deadline) return false;
    if (n < 0) pause_while_idle();
  }
  return true;
}

void FabricTransport::wait() {
  while (in_flight() > 0) progress(true);
  if (m_local) m_local->batch_done();
  if (m_error) {
    FabricReadError error = std::move(*m_error);
    m_error.reset();
    throw error;
  }
}

}  // namespace ddstage::detail
