#include "transport/mpi_rma_transport.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "mpi/mpi_comm.hpp"

namespace ddstage::detail {
namespace {

/// MPI counts are int: a longer run is split into gets of this many bytes.
constexpr uint64_t max_get_bytes = 1ull << 30;

}  // namespace

MpiRmaTransport::MpiRmaTransport(MPI_Win win, std::vector<const std::byte*> direct)
    : m_win(win), m_direct(std::move(direct)), m_is_touched(m_direct.size()) {}

void MpiRmaTransport::post(std::span<const ReadOp> reads) {
  try {
    for (const ReadOp& op : reads) {
      if (const std::byte* base = m_direct[static_cast<std::size_t>(op.target)]) {
        std::memcpy(op.dest, base + op.offset, op.bytes);
      } else {
        get(op);
      }
    }
  } catch (...) {
    // The gets already started would land in the caller's buffer after it saw the error.
    quiesce();
    throw;
  }
}

void MpiRmaTransport::get(const ReadOp& op) {
  // Noted first: when a later part of a long run fails, the parts before it are flushed too.
  if (!m_is_touched[op.target]) {
    m_is_touched[op.target] = 1;
    m_touched.push_back(op.target);
  }
  for (uint64_t done = 0; done < op.bytes; done += max_get_bytes) {
    const int n = static_cast<int>(std::min(max_get_bytes, op.bytes - done));
    mpi_check(MPI_Get(op.dest + done, n, MPI_BYTE, op.target,
                      static_cast<MPI_Aint>(op.offset + done), n, MPI_BYTE, m_win),
              "MPI_Get", {.rank = op.target});
  }
}

void MpiRmaTransport::wait() {
  if (m_touched.empty()) return;
  try {
    flush();
  } catch (...) {
    quiesce();
    throw;
  }
}

void MpiRmaTransport::flush() {
  // One flush per batch. flush_all visits every rank of the window, so when a batch touches
  // few of many ranks, flushing just those is cheaper.
  if (m_touched.size() * 4 < m_is_touched.size()) {
    for (int r : m_touched) mpi_check(MPI_Win_flush(r, m_win), "MPI_Win_flush", {.rank = r});
  } else {
    mpi_check(MPI_Win_flush_all(m_win), "MPI_Win_flush_all");
  }
  for (int r : m_touched) m_is_touched[r] = 0;
  m_touched.clear();
}

void MpiRmaTransport::quiesce() noexcept {
  // A get that failed to post never started; flushing every rank with gets out completes the
  // rest (a flush that fails leaves nothing more to wait for).
  for (int r : m_touched) {
    MPI_Win_flush(r, m_win);
    m_is_touched[r] = 0;
  }
  m_touched.clear();
}

}  // namespace ddstage::detail
