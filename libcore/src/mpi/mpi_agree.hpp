// The one way ranks of an MPI job agree on whether a collective step failed.
#pragma once

#include <exception>

#include <mpi.h>

namespace ddstage::detail {

/// Collective over comm: returns on every rank when no rank failed (failure empty everywhere).
/// Otherwise throws on every rank: the lowest failing rank rethrows its own exception, every
/// other rank an exception of the same class (UsageError, IndexError, ChecksumError, IoError,
/// Error of the same kind...) whose message says "rank R failed: <its message>" and whose
/// context carries that rank. One encoding of "I failed" for every caller.
void agree(const std::exception_ptr& failure, MPI_Comm comm);

}  // namespace ddstage::detail
