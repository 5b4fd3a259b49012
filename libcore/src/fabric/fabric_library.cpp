#include "fabric/fabric_library.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "ddstage/error.hpp"
#include "shared_library.hpp"
#include "signal_dispositions.hpp"

namespace ddstage::detail {
namespace {

// The ABI major the headers describe (libfabric has kept it since 1.0). By soname, so found as
// dlopen finds it: LD_LIBRARY_PATH, the RUNPATH of the object holding libcore (ddstage's and the
// Python module's name a libfabric built against outside the system directories:
// cmake/ddstage_fabric_abi.cmake), the loader cache.
constexpr const char* library_name = "libfabric.so.1";

/// libfabric's handle and the functions resolved from it.
class FabricLibrary {
 public:
  // RTLD_NOW: a library that cannot bind its own dependencies fails here, with dlerror naming
  // them, rather than aborting the process at a lazy binding in the middle of a read.
  // RTLD_LOCAL: its symbols stay out of the global scope, so they cannot stand in for those of
  // a libfabric an application or MPI loads itself (which gets this same copy by soname anyway).
  FabricLibrary() : m_library(library_name, RTLD_NOW | RTLD_LOCAL) {
    // The symbol versions the link editor would have bound: the default ones of the libfabric
    // whose headers this was compiled with (cmake/ddstage_fabric_abi.cmake). A newer libfabric
    // keeps those as compatibility entry points for the fi_info layout these headers describe.
    m_api.getinfo = resolve<decltype(m_api.getinfo)>("fi_getinfo", DDSTAGE_FI_GETINFO_ABI);
    m_api.fabric = resolve<decltype(m_api.fabric)>("fi_fabric", DDSTAGE_FI_FABRIC_ABI);
    m_api.freeinfo = resolve<decltype(m_api.freeinfo)>("fi_freeinfo", DDSTAGE_FI_FREEINFO_ABI);
    m_api.dupinfo = resolve<decltype(m_api.dupinfo)>("fi_dupinfo", DDSTAGE_FI_DUPINFO_ABI);
    m_api.strerror = resolve<decltype(m_api.strerror)>("fi_strerror", DDSTAGE_FI_STRERROR_ABI);
    m_api.version = resolve<decltype(m_api.version)>("fi_version", DDSTAGE_FI_VERSION_ABI);
  }
  const FabricApi& api() const noexcept { return m_api; }

 private:
  template <class Function>
  Function resolve(const char* symbol, const char* version) const {
    return reinterpret_cast<Function>(m_library.symbol(symbol, version));
  }

  SharedLibrary m_library;
  FabricApi m_api{};
};

std::once_flag load_once;
// Set once loaded, and never destroyed: providers' threads, and the endpoints FabricTransport
// abandons (fabric_transport.hpp), may call into libfabric until the process ends, after any
// destructor that would dlclose it.
std::atomic<const FabricLibrary*> library{nullptr};
std::string why_not_loaded;

const FabricLibrary* loaded() noexcept {
  return library.load(std::memory_order_acquire);
}

}  // namespace

const FabricApi& fabric_api() {
  if (const FabricLibrary* l = loaded()) return l->api();
  // Its dependencies' constructors install signal handlers (signal_dispositions.hpp). Taken
  // before call_once: a thread that waits for the load while holding a guard of its own would
  // otherwise wait for the loading thread, which waits for that guard.
  const SignalDispositions kept(std::string("loading ") + library_name);
  std::call_once(load_once, [] {
    try {
      library.store(new FabricLibrary(), std::memory_order_release);
    } catch (const UsageError& e) {
      why_not_loaded = e.message();
    }
  });
  if (const FabricLibrary* l = loaded()) return l->api();
  throw UsageError(why_not_loaded);
}

const char* fabric_strerror(int code) noexcept {
  const FabricLibrary* l = loaded();
  return l ? l->api().strerror(code) : std::strerror(code);
}

void fabric_freeinfo(fi_info* info) noexcept {
  if (const FabricLibrary* l = loaded()) l->api().freeinfo(info);
}

}  // namespace ddstage::detail
