#include "ddstage/error.hpp"

#include <cstring>

namespace ddstage {
namespace {

std::string with_context(const std::string& message, const ErrorContext& c) {
  std::string out = message;
  std::string where;
  auto add = [&where](const std::string& part) { where += (where.empty() ? "" : ", ") + part; };
  if (!c.file.empty() && message.find(c.file) == std::string::npos) add("file " + c.file);
  if (c.sample) add("sample " + std::to_string(*c.sample));
  if (!c.field.empty()) add("field " + c.field);
  if (c.rank) add("rank " + std::to_string(*c.rank));
  if (!where.empty()) out += " (" + where + ")";
  return out;
}

/// Messages quote outside bytes (a parser's error text, a token, a name from a file): their
/// control characters become '?', so that what() stays the one line the CLI prints. Bytes of
/// UTF-8 names are kept.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

}  // namespace

Error::Error(ErrorKind kind, const std::string& message, ErrorContext context)
    : std::runtime_error(one_line(with_context(message, context))),
      m_kind(kind),
      m_message(one_line(message)),
      m_context(std::move(context)) {}

IoError::IoError(const std::string& call, int err, ErrorContext context)
    : IoError(err, call + ": " + std::strerror(err), std::move(context)) {}

IoError::IoError(int err, const std::string& message, ErrorContext context)
    // A path the user named that does not exist or may not be read is their input, not a
    // run-time failure.
    : Error(err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM ? ErrorKind::usage
                                                                             : ErrorKind::runtime,
            message, std::move(context)),
      m_errno(err) {}

IoError IoError::with_message(int err, const std::string& message, ErrorContext context) {
  return IoError(err, message, std::move(context));
}

}  // namespace ddstage
