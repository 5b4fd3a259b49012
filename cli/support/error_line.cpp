#include "support/error_line.hpp"

#include <cstdio>
#include <mutex>

#include "ddstage/error.hpp"

namespace ddstage::cli {

int report_error(const std::string& message, int code) {
  static std::mutex mutex;
  static std::string reported;
  const std::lock_guard lock(mutex);
  if (message != reported) std::fprintf(stderr, "ddstage: error: %s\n", message.c_str());
  reported = message;
  return code;
}

int report_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ddstage::Error& e) {
    return report_error(e.what(), ddstage::exit_code(e.kind()));
  } catch (const std::exception& e) {
    return report_error(std::string("internal error: ") + e.what(), 1);
  }
}

}  // namespace ddstage::cli
