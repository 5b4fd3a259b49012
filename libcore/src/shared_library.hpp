// A shared library opened at run time (dlopen), for dependencies a process loads only when it
// uses them.
#pragma once

#include <string>

namespace ddstage::detail {

/// Owns one dlopen handle; the destructor dlclose's it.
class SharedLibrary {
 public:
  /// dlopen(name, flags). Throws UsageError "NAME could not be loaded: DLERROR": a library the
  /// node lacks makes the feature that needs it unavailable, as a build without it would.
  SharedLibrary(const std::string& name, int flags);
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  /// The address of `symbol` at symbol version `version` (dlvsym), or at its default version
  /// when `version` is empty (dlsym). Throws UsageError naming the library, the symbol and
  /// dlerror when it has none.
  void* symbol(const char* symbol, const std::string& version) const;
  const std::string& name() const noexcept { return m_name; }

 private:
  std::string m_name;
  void* m_handle;
};

}  // namespace ddstage::detail
