#include "error_record.hpp"

#include <array>
#include <utility>

namespace ddstage::detail {
namespace {

constexpr std::array<std::pair<ErrorClass, std::string_view>, 6> class_names{{
    {ErrorClass::error, "error"},
    {ErrorClass::usage, "usage"},
    {ErrorClass::io, "io"},
    {ErrorClass::index, "index"},
    {ErrorClass::stale, "stale"},
    {ErrorClass::checksum, "checksum"},
}};

ErrorClass class_of(const Error& e) noexcept {
  if (dynamic_cast<const IoError*>(&e)) return ErrorClass::io;
  if (dynamic_cast<const IndexError*>(&e)) return ErrorClass::index;
  if (dynamic_cast<const StaleError*>(&e)) return ErrorClass::stale;
  if (dynamic_cast<const ChecksumError*>(&e)) return ErrorClass::checksum;
  if (dynamic_cast<const UsageError*>(&e)) return ErrorClass::usage;
  return ErrorClass::error;
}

}  // namespace

std::string_view class_name(ErrorClass c) noexcept {
  for (const auto& [type, name] : class_names) {
    if (type == c) return name;
  }
  return "error";
}

ErrorClass class_named(std::string_view name) noexcept {
  for (const auto& [type, spelled] : class_names) {
    if (spelled == name) return type;
  }
  return ErrorClass::error;
}

ErrorRecord ErrorRecord::of(const Error& e) {
  const auto* io = dynamic_cast<const IoError*>(&e);
  return {class_of(e), e.kind(), io ? io->native_code() : 0, e.what()};
}

ErrorRecord ErrorRecord::of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return of(e);
  } catch (const std::exception& e) {
    return {.text = e.what()};
  } catch (...) {
    return {.text = "an exception that is not a std::exception"};
  }
}

void ErrorRecord::raise(const std::string& prefix, ErrorContext context) const {
  const auto message = prefix + text;
  switch (type) {
    case ErrorClass::usage:
      throw UsageError(message, std::move(context));
    case ErrorClass::io:
      throw IoError::with_message(native_code, message, std::move(context));
    case ErrorClass::index:
      throw IndexError(message, std::move(context));
    case ErrorClass::stale:
      throw StaleError(message, std::move(context));
    case ErrorClass::checksum:
      throw ChecksumError(message, std::move(context));
    case ErrorClass::error:
      break;
  }
  throw Error(kind, message, std::move(context));
}

}  // namespace ddstage::detail
