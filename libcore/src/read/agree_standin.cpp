// TEMPORARY stand-in for agree() (libcore/src/mpi/mpi_agree.hpp) until the "mpi-control" branch
// is merged: the lead deletes this file at merge. Keeps only the usage/runtime distinction.
#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_comm.hpp"

namespace ddstage::detail {
namespace {

std::string describe(const std::exception_ptr& failure) {
  if (!failure) return {};
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return (e.kind() == ErrorKind::usage ? "U" : "R") + std::string(e.what());
  } catch (const std::exception& e) {
    return "R" + std::string(e.what());
  } catch (...) {
    return "Ran unknown exception";
  }
}

}  // namespace

void agree(const std::exception_ptr& failure, MPI_Comm comm) {
  const auto first = first_failure(describe(failure), comm);
  if (!first) return;
  int self = 0;
  MPI_Comm_rank(comm, &self);
  if (first->rank == self) std::rethrow_exception(failure);
  const std::string message = fmt::format("rank {} failed: {}", first->rank, first->text.substr(1));
  if (first->text[0] == 'U') throw UsageError(message, {.rank = first->rank});
  throw Error(ErrorKind::runtime, message, {.rank = first->rank});
}

}  // namespace ddstage::detail
