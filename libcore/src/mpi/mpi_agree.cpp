#include "mpi_agree.hpp"

#include <fmt/format.h>

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

std::optional<RankError> first_error(const std::exception_ptr& failure, MPI_Comm comm) {
  if (all_ok(!failure, comm)) return std::nullopt;
  // Texts travel only on failure: the lowest failing rank's, through rank 0.
  const auto failures =
      gather_strings(failure ? to_wire(ErrorRecord::of(failure)) : std::string(), comm);
  RankError first;
  for (std::size_t r = 0; r < failures.size(); ++r) {
    if (failures[r].empty()) continue;
    first = {static_cast<int>(r), from_wire<ErrorRecord>(failures[r])};
    break;
  }
  return broadcast(first, comm);
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
