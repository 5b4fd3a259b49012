#include "shared_library.hpp"

#include <dlfcn.h>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"

namespace ddstage::detail {
namespace {

std::string dl_error() {
  const char* text = dlerror();
  return text ? text : "no reason given";
}

}  // namespace

SharedLibrary::SharedLibrary(const std::string& name, int flags)
    : m_name(name), m_handle(dlopen(name.c_str(), flags)) {
  if (!m_handle) throw UsageError(name + " could not be loaded: " + dl_error());
}

SharedLibrary::~SharedLibrary() {
  if (m_handle && dlclose(m_handle) != 0) spdlog::warn("dlclose of {}: {}", m_name, dl_error());
}

void* SharedLibrary::symbol(const char* symbol, const std::string& version) const {
  // A null address is also a valid symbol value: dlerror, cleared first, tells them apart.
  dlerror();
  void* address =
      version.empty() ? dlsym(m_handle, symbol) : dlvsym(m_handle, symbol, version.c_str());
  if (const char* failed = dlerror()) {
    throw UsageError(m_name + " has no " + symbol + (version.empty() ? "" : "@" + version) + ": " +
                     failed);
  }
  return address;
}

}  // namespace ddstage::detail
