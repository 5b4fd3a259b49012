// The one way ranks of an MPI job agree on whether a collective step failed.
#pragma once

#include <mpi.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "error_record.hpp"

namespace ddstage::detail {

/// Collective over comm: returns on every rank when no rank failed (failure empty everywhere).
/// Otherwise throws on every rank: the lowest failing rank rethrows its own exception, every
/// other rank an exception of the same class (UsageError, IndexError, ChecksumError, IoError,
/// Error of the same kind...) whose message says "rank R failed: <its message>" and whose
/// context carries that rank. One encoding of "I failed" for every caller.
void agree(const std::exception_ptr& failure, MPI_Comm comm);

/// Runs step and returns what it threw, or null: a rank's part of a step the ranks then agree on.
std::exception_ptr caught(const std::function<void()>& step);

/// The lowest failing rank and its error, as every rank learns it.
struct RankError {
  int rank = 0;
  ErrorRecord error;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.rank, self.error);
  }
};

/// Collective, what agree() is built on, for callers that word the error themselves (the
/// store server names the failing rank's host): nullopt on every rank when no rank failed,
/// otherwise the lowest failing rank's error on every rank. The common case, no failure, costs
/// one small allreduce.
std::optional<RankError> first_error(const std::exception_ptr& failure, MPI_Comm comm);

/// first_error for a failure already encoded (to_wire of its ErrorRecord; empty: no failure).
/// A record rank 0 cannot read still counts, as a run-time Error naming "an unreadable failure
/// record", so that every rank leaves.
std::optional<RankError> first_error_of_record(const std::string& record, MPI_Comm comm);

/// Collective, for a step only `root` takes (so that no rank waits for a broadcast root never
/// reaches): what `make` returns on root, on every rank. When it throws, root rethrows its own
/// exception and the others an exception of its class, its message after "rank ROOT: ".
std::string root_outcome(const std::function<std::string()>& make, int root, MPI_Comm comm);

}  // namespace ddstage::detail
