// libfabric, loaded on first use: the functions libcore calls by name, resolved at run time so
// that a process which never reads over fabric never loads libfabric (and its providers'
// libraries, whose constructors cost a Debian process ~0.2 s before main).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

namespace ddstage::detail {

/// libfabric's exported functions that libcore calls, resolved from the loaded library. The rest
/// of its API is inline, through the objects' ops tables, and needs no symbol.
struct FabricApi {
  decltype(&::fi_getinfo) getinfo;
  decltype(&::fi_fabric) fabric;
  decltype(&::fi_freeinfo) freeinfo;
  decltype(&::fi_dupinfo) dupinfo;
  decltype(&::fi_strerror) strerror;
  decltype(&::fi_version) version;

  /// fi_allocinfo(), which the headers define as fi_dupinfo(NULL).
  fi_info* allocinfo() const { return dupinfo(nullptr); }
};

/// libfabric.so.1, loaded by the first call in the process (thread-safe). Throws UsageError
/// "libfabric.so.1 could not be loaded: WHY", on that call and every later one, when it cannot
/// be: this node then lacks the fabric transport, as a build without libfabric does.
const FabricApi& fabric_api();

/// libfabric's text for a positive FI_* or errno code; strerror's while libfabric is not loaded
/// (no libfabric call can have returned the code then).
const char* fabric_strerror(int code) noexcept;

/// fi_freeinfo, for InfoPtr: a list only exists once libfabric is loaded.
void fabric_freeinfo(fi_info* info) noexcept;

}  // namespace ddstage::detail
