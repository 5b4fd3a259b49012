// Errors thrown by libcore: one base type the CLI maps to an exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace ddstage {

/// Whether an error is the caller's input (exit 2) or something that went wrong at run time (exit
/// 1).
enum class ErrorKind { usage, runtime };

/// Where an error happened; every part is optional and appended to the message.
struct ErrorContext {
  std::string file;
  std::optional<uint64_t> sample;
  std::string field;
  std::optional<int> rank;
};

/// Base of every exception libcore throws. what() is one line, context included.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, ErrorContext context = {});

  ErrorKind kind() const noexcept { return m_kind; }
  const ErrorContext& context() const noexcept { return m_context; }
  /// The message without the context suffix.
  const std::string& message() const noexcept { return m_message; }

 private:
  ErrorKind m_kind;
  std::string m_message;
  ErrorContext m_context;
};

/// Bad flag, bad id, missing or unusable input the user named.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message, ErrorContext context = {})
      : Error(ErrorKind::usage, message, std::move(context)) {}
};

/// A system call failed; carries errno and names the call. ENOENT, ENOTDIR, EACCES and EPERM
/// are usage errors (a path the user named is missing or forbidden), the rest run-time ones.
class IoError : public Error {
 public:
  IoError(const std::string& call, int err, ErrorContext context = {});
  /// An IoError whose message is already written (rebuilt from another rank's or process's).
  static IoError with_message(int err, const std::string& message, ErrorContext context = {});
  int native_code() const noexcept { return m_errno; }

 private:
  IoError(int err, const std::string& message, ErrorContext context);
  int m_errno;
};

/// index.bin or manifest.yaml is damaged, truncated or from an unknown version.
class IndexError : public Error {
 public:
  explicit IndexError(const std::string& message, ErrorContext context = {})
      : Error(ErrorKind::runtime, message, std::move(context)) {}
};

/// A file the index points at changed after it was flattened.
class StaleError : public Error {
 public:
  explicit StaleError(const std::string& message, ErrorContext context = {})
      : Error(ErrorKind::runtime, message, std::move(context)) {}
};

/// Bytes read do not match the checksum recorded at flatten time.
class ChecksumError : public Error {
 public:
  explicit ChecksumError(const std::string& message, ErrorContext context = {})
      : Error(ErrorKind::runtime, message, std::move(context)) {}
};

/// Exit code the CLI uses for an error of this kind (DESIGN.md: 1 runtime, 2 usage).
inline int exit_code(ErrorKind kind) {
  return kind == ErrorKind::usage ? 2 : 1;
}

}  // namespace ddstage
