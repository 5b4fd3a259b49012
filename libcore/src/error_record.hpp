// An error as data: what crosses to another rank or down the control socket when a step fails,
// so that the receiver throws the same class of error (and the CLI exits with the same code).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "ddstage/error.hpp"

namespace ddstage::detail {

/// Which exception class an ErrorRecord rebuilds.
enum class ErrorClass : uint8_t { error, usage, io, index, stale, checksum };

/// The spelling of a class on the control socket ("usage", "io", ...).
std::string_view class_name(ErrorClass c) noexcept;
/// The class a name spells; ErrorClass::error for a name this ddstage does not know.
ErrorClass class_named(std::string_view name) noexcept;

struct ErrorRecord {
  ErrorClass type = ErrorClass::error;
  ErrorKind kind = ErrorKind::runtime;  ///< for ErrorClass::error; the others imply theirs
  int native_code = 0;                  ///< errno, for ErrorClass::io
  std::string text;                     ///< the one line what() said, context included

  /// What `failure` holds: a ddstage::Error of its class, anything else a run-time Error with
  /// its what() (or a fixed text for an exception that is not a std::exception).
  static ErrorRecord of(const std::exception_ptr& failure);
  static ErrorRecord of(const Error& e);

  /// Throws the recorded class with message `prefix` + text and `context`.
  [[noreturn]] void raise(const std::string& prefix = {}, ErrorContext context = {}) const;

  /// One struct, both ways: the fields a wire format reads or writes.
  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.type, self.kind, self.native_code, self.text);
  }
};

}  // namespace ddstage::detail
