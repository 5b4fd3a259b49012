#include "mpi_agree.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "mpi_exchange.hpp"

namespace ddstage::detail {

std::exception_ptr caught(const std::function<void()>& step) {
  try {
    step();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

namespace {

/// Rank 0's view of the lowest failing rank: a record it cannot read still names that rank, so
/// that rank 0 reaches the broadcast every other rank waits in.
RankError lowest_failure(const std::vector<std::string>& records) {
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (records[r].empty()) continue;
    const int rank = static_cast<int>(r);
    try {
      return {rank, from_wire<ErrorRecord>(records[r])};
    } catch (const std::exception& e) {
      return {rank,
              ErrorRecord::of(Error(ErrorKind::runtime,
                                    fmt::format("an unreadable failure record ({})", e.what()),
                                    {.rank = rank}))};
    }
  }
  return {};
}

}  // namespace

std::optional<RankError> first_error_of_record(const std::string& record, MPI_Comm comm) {
  if (all_ok(record.empty(), comm)) return std::nullopt;
  // Texts travel only on failure: the lowest failing rank's, through rank 0.
  return broadcast(lowest_failure(gather_strings(record, comm)), comm);
}

std::optional<RankError> first_error(const std::exception_ptr& failure, MPI_Comm comm) {
  return first_error_of_record(failure ? to_wire(ErrorRecord::of(failure)) : std::string(), comm);
}

void agree(const std::exception_ptr& failure, MPI_Comm comm) {
  const auto first = first_error(failure, comm);
  if (!first) return;
  int self = 0;
  MPI_Comm_rank(comm, &self);
  if (first->rank == self) std::rethrow_exception(failure);
  first->error.raise(fmt::format("rank {} failed: ", first->rank), {.rank = first->rank});
}

std::string root_outcome(const std::function<std::string()>& make, int root, MPI_Comm comm) {
  int self = 0;
  MPI_Comm_rank(comm, &self);
  std::string outcome;
  const auto failure = caught([&] {
    if (self == root) outcome = make();
  });
  if (const auto first = first_error(failure, comm)) {
    if (failure) std::rethrow_exception(failure);
    first->error.raise(fmt::format("rank {}: ", root));
  }
  return bcast_string(outcome, comm, root);
}

}  // namespace ddstage::detail
