// The one line a failed command leaves on stderr, and its exit code.
#pragma once

#include <exception>
#include <string>

namespace ddstage::cli {

/// Prints "ddstage: error: MESSAGE" and returns code. A message already printed by this process
/// is not printed again: `serve` reports its error before MPI_Finalize, and main's catch then
/// sees the same exception.
int report_error(const std::string& message, int code);

/// report_error for an exception: a ddstage::Error's message and exit code, or "internal error".
int report_exception(const std::exception_ptr& error);

}  // namespace ddstage::cli
