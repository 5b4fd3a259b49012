// Typed values between ranks (see wire_bytes.hpp): what the string collectives carry, each
// struct spelled once instead of a line of words every receiver splits again.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "mpi_comm.hpp"
#include "wire_bytes.hpp"

namespace ddstage::detail {

/// Rank 0's value, on every rank (the others' `value` is ignored); waits gently (bcast_string).
template <class T>
T broadcast(const T& value, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return from_wire<T>(bcast_string(rank == 0 ? to_wire(value) : std::string(), comm));
}

/// Every rank's value, by rank, on rank 0 (empty elsewhere).
template <class T>
std::vector<T> gather(const T& value, MPI_Comm comm) {
  std::vector<T> out;
  for (const auto& bytes : gather_strings(to_wire(value), comm)) out.push_back(from_wire<T>(bytes));
  return out;
}

/// Every rank's value, by rank, on every rank.
template <class T>
std::vector<T> allgather(const T& value, MPI_Comm comm) {
  std::vector<T> out;
  for (const auto& bytes : allgather_strings(to_wire(value), comm))
    out.push_back(from_wire<T>(bytes));
  return out;
}

}  // namespace ddstage::detail
