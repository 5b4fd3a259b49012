// get_batch_collective's engine: not a Transport (no one-sided reads) but a collective reader in
// which every rank asks, owners pack, and rows travel back all-to-all in bounded rounds.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_plan.hpp"

namespace ddstage::detail {

/// What the exchange needs of a dataset: where every sample lives and this rank's region.
struct ShardMap {
  const Index* index;
  const ShardPlan* plan;
  const ShardLayout* layout;          // this rank's
  std::span<const std::byte> region;  // this rank's, filled
};

/// Collective get_batch over a communicator. One per Reader (its vectors are reused, so a
/// warm exchange allocates nothing); all ranks call exchange() together.
class CollectiveExchange {
 public:
  /// max_round_bytes: most bytes this rank sends in one round, 1 .. INT_MAX.
  CollectiveExchange(MPI_Comm comm, uint64_t max_round_bytes);

  /// Rows of field for ids (checked by every rank: in range, dest sized bytes_of, under 2 GiB)
  /// into dest in the caller's order.
  void exchange(const ShardMap& map, uint32_t field, std::span<const uint64_t> ids,
                std::byte* dest);

 private:
  // The map is the caller's, valid for one exchange(): passed down, never kept.
  void send_requests(const ShardMap& map, uint32_t field, std::span<const uint64_t> ids);
  int plan_rounds(const ShardMap& map, uint32_t field);
  void run_round(const ShardMap& map, int round, uint32_t field, std::byte* dest);
  void pack(const ShardMap& map, uint32_t field);
  void unpack(const ShardMap& map, uint32_t field, std::byte* dest);

  MPI_Comm m_comm;
  int m_self = 0;
  int m_size = 1;
  uint64_t m_cap;
  // Requester side: ids grouped by owner (m_order: caller position of each), where each row
  // goes in dest, and per owner how many of its rows arrived so far.
  std::vector<int> m_ask_count, m_ask_displ;
  std::vector<uint64_t> m_ask_ids, m_dest_at;
  std::vector<std::size_t> m_order;
  std::vector<int> m_got;
  // Owner side: requests grouped by requester, rows sent so far to each, and the schedule
  // (rows to each requester per round, rounds x ranks).
  std::vector<int> m_req_count, m_req_displ;
  std::vector<uint64_t> m_req_ids;
  std::vector<int> m_sent;
  std::vector<int> m_schedule;
  // One round's counts, displacements and bytes.
  std::vector<int> m_out_rows, m_in_rows, m_out_bytes, m_out_displ, m_in_bytes, m_in_displ;
  std::vector<std::byte> m_out, m_in;
};

}  // namespace ddstage::detail
