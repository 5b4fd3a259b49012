#include "read/collective_exchange.hpp"

#include <algorithm>
#include <cstring>

#include "mpi/mpi_comm.hpp"

namespace ddstage::detail {
namespace {

/// Exclusive prefix sums of counts into displs.
void exclusive_prefix_sums(const std::vector<int>& counts, std::vector<int>& displs) {
  int at = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = at;
    at += counts[r];
  }
}

uint64_t row_bytes(const ShardMap& map, uint32_t field, uint64_t id) {
  const FieldInfo& info = map.index->fields()[field];
  return info.variable ? map.index->entry(id, field).length : info.row_bytes;
}

/// Bytes of `rows` consecutive ids starting at ids.
uint64_t rows_bytes(const ShardMap& map, uint32_t field, const uint64_t* ids, int rows) {
  uint64_t bytes = 0;
  for (int i = 0; i < rows; ++i) bytes += row_bytes(map, field, ids[i]);
  return bytes;
}

}  // namespace

CollectiveExchange::CollectiveExchange(MPI_Comm comm, uint64_t max_round_bytes)
    : m_comm(comm), m_cap(max_round_bytes) {
  MPI_Comm_rank(comm, &m_self);
  MPI_Comm_size(comm, &m_size);
  for (auto* v : {&m_ask_count, &m_ask_displ, &m_got, &m_req_count, &m_req_displ, &m_sent,
                  &m_out_rows, &m_in_rows, &m_out_bytes, &m_out_displ, &m_in_bytes, &m_in_displ}) {
    v->resize(static_cast<std::size_t>(m_size));
  }
}

void CollectiveExchange::exchange(const ShardMap& map, uint32_t field,
                                  std::span<const uint64_t> ids, std::byte* dest) {
  send_requests(map, field, ids);
  const int rounds = plan_rounds(map, field);
  std::fill(m_got.begin(), m_got.end(), 0);
  std::fill(m_sent.begin(), m_sent.end(), 0);
  for (int k = 0; k < rounds; ++k) run_round(map, k, field, dest);
}

void CollectiveExchange::send_requests(const ShardMap& map, uint32_t field,
                                       std::span<const uint64_t> ids) {
  // Group ids by owner (a counting sort keeps each owner's ids in caller order) and note
  // where each row lands in dest, so arriving rows are placed without searching.
  std::fill(m_ask_count.begin(), m_ask_count.end(), 0);
  m_ask_ids.resize(ids.size());
  m_dest_at.resize(ids.size());
  m_req_ids.resize(ids.size());  // scratch: each id's owner until the requests go out
  for (std::size_t i = 0; i < ids.size(); ++i) {
    m_req_ids[i] = static_cast<uint64_t>(map.plan->owner(ids[i]));
    ++m_ask_count[m_req_ids[i]];
  }
  exclusive_prefix_sums(m_ask_count, m_ask_displ);
  std::fill(m_got.begin(), m_got.end(), 0);
  uint64_t at = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto owner = m_req_ids[i];
    const auto pos = static_cast<std::size_t>(m_ask_displ[owner] + m_got[owner]++);
    m_ask_ids[pos] = ids[i];
    m_dest_at[pos] = at;
    at += row_bytes(map, field, ids[i]);
  }
  mpi_check(MPI_Alltoall(m_ask_count.data(), 1, MPI_INT, m_req_count.data(), 1, MPI_INT, m_comm),
            "MPI_Alltoall");
  exclusive_prefix_sums(m_req_count, m_req_displ);
  m_req_ids.resize(static_cast<std::size_t>(m_req_displ.back() + m_req_count.back()));
  mpi_check(
      MPI_Alltoallv(m_ask_ids.data(), m_ask_count.data(), m_ask_displ.data(), MPI_UINT64_T,
                    m_req_ids.data(), m_req_count.data(), m_req_displ.data(), MPI_UINT64_T, m_comm),
      "MPI_Alltoallv");
}

int CollectiveExchange::plan_rounds(const ShardMap& map, uint32_t field) {
  // Greedy: a round takes requested rows until the next one would pass the cap; a row larger
  // than the cap goes alone. Each owner starts with a different requester, so one round's
  // rows spread over the receivers instead of all going to rank 0.
  m_schedule.clear();
  std::fill(m_sent.begin(), m_sent.end(), 0);
  bool left = std::any_of(m_req_count.begin(), m_req_count.end(), [](int n) { return n > 0; });
  while (left) {
    const std::size_t base = m_schedule.size();
    m_schedule.resize(base + static_cast<std::size_t>(m_size), 0);
    uint64_t used = 0;
    bool full = false;
    left = false;
    for (int j = 0; j < m_size; ++j) {
      const int r = (m_self + j) % m_size;
      while (!full && m_sent[r] < m_req_count[r]) {
        const uint64_t b =
            row_bytes(map, field, m_req_ids[static_cast<std::size_t>(m_req_displ[r] + m_sent[r])]);
        if (used > 0 && used + b > m_cap) {
          full = true;
        } else {
          used += b;
          ++m_sent[r];
          ++m_schedule[base + static_cast<std::size_t>(r)];
        }
      }
      left = left || m_sent[r] < m_req_count[r];
    }
  }
  int mine = static_cast<int>(m_schedule.size() / static_cast<std::size_t>(m_size)), rounds = 0;
  mpi_check(MPI_Allreduce(&mine, &rounds, 1, MPI_INT, MPI_MAX, m_comm), "MPI_Allreduce");
  return rounds;
}

void CollectiveExchange::run_round(const ShardMap& map, int round, uint32_t field,
                                   std::byte* dest) {
  const auto base = static_cast<std::size_t>(round) * static_cast<std::size_t>(m_size);
  for (std::size_t r = 0; r < m_out_rows.size(); ++r) {
    m_out_rows[r] =
        base < m_schedule.size() ? m_schedule[base + r] : 0;  // done early: send nothing
  }
  // Receivers learn how many of their rows each owner sends now; the bytes follow from the index.
  mpi_check(MPI_Alltoall(m_out_rows.data(), 1, MPI_INT, m_in_rows.data(), 1, MPI_INT, m_comm),
            "MPI_Alltoall");
  pack(map, field);
  int at = 0;
  for (int o = 0; o < m_size; ++o) {
    m_in_displ[o] = at;
    // A rank's whole batch is under 2 GiB (checked before the exchange).
    m_in_bytes[o] = static_cast<int>(
        rows_bytes(map, field, m_ask_ids.data() + m_ask_displ[o] + m_got[o], m_in_rows[o]));
    at += m_in_bytes[o];
  }
  if (m_in.size() < static_cast<std::size_t>(at)) m_in.resize(static_cast<std::size_t>(at));
  mpi_check(MPI_Alltoallv(m_out.data(), m_out_bytes.data(), m_out_displ.data(), MPI_BYTE,
                          m_in.data(), m_in_bytes.data(), m_in_displ.data(), MPI_BYTE, m_comm),
            "MPI_Alltoallv");
  unpack(map, field, dest);
}

void CollectiveExchange::pack(const ShardMap& map, uint32_t field) {
  int at = 0;
  for (int r = 0; r < m_size; ++r) {
    m_out_displ[r] = at;
    // At most max(cap, one row), both under 2 GiB.
    m_out_bytes[r] = static_cast<int>(
        rows_bytes(map, field, m_req_ids.data() + m_req_displ[r] + m_sent[r], m_out_rows[r]));
    at += m_out_bytes[r];
  }
  // Grown, never shrunk: resizing within capacity would still zero the new part every round.
  if (m_out.size() < static_cast<std::size_t>(at)) m_out.resize(static_cast<std::size_t>(at));
  std::byte* out = m_out.data();
  for (int r = 0; r < m_size; ++r) {
    const auto first = static_cast<std::size_t>(m_req_displ[r] + m_sent[r]);
    for (std::size_t i = first; i < first + static_cast<std::size_t>(m_out_rows[r]); ++i) {
      const uint64_t b = row_bytes(map, field, m_req_ids[i]);
      if (b) std::memcpy(out, map.region.data() + map.layout->row_offset(m_req_ids[i], field), b);
      out += b;
    }
    m_sent[r] += m_out_rows[r];
  }
}

void CollectiveExchange::unpack(const ShardMap& map, uint32_t field, std::byte* dest) {
  const std::byte* in = m_in.data();
  for (int o = 0; o < m_size; ++o) {
    const auto first = static_cast<std::size_t>(m_ask_displ[o] + m_got[o]);
    for (std::size_t i = first; i < first + static_cast<std::size_t>(m_in_rows[o]); ++i) {
      const uint64_t b = row_bytes(map, field, m_ask_ids[i]);
      if (b) std::memcpy(dest + m_dest_at[i], in, b);
      in += b;
    }
    m_got[o] += m_in_rows[o];
  }
}

}  // namespace ddstage::detail
