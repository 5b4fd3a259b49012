// RAII owners for libfabric objects, and the error a failed libfabric call becomes.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <memory>
#include <string>
#include <type_traits>

#include "ddstage/error.hpp"
#include "fabric/fabric_library.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// A libfabric call that failed: names the call, the provider and fi_strerror of its code.
/// may_be_withdrawn: the codes the server closing the region's registration (a replace or
/// unload) can also cause.
class FabricError : public TransportError {
 public:
  /// `rc` as the call returned it (negative); `detail` is appended (a CQ error's provider text);
  /// `provider_code`: a failed completion's prov_errno, 0 for a call.
  FabricError(const std::string& call, const std::string& provider, int rc,
              ErrorContext context = {}, const std::string& detail = {}, int provider_code = 0);
  /// The positive FI_* / errno code.
  int native_code() const noexcept { return m_code; }

 private:
  int m_code;
};

/// Throws FabricError when rc is negative; returns rc otherwise.
inline int fabric_check(int rc, const char* call, const std::string& provider,
                        ErrorContext context = {}) {
  if (rc < 0) throw FabricError(call, provider, rc, std::move(context));
  return rc;
}

/// Closes any fid-bearing object. A failing close is logged: destructors never throw.
struct FidCloser {
  void close(fid_t fid, const char* what) const noexcept;
  template <class T>
  void operator()(T* object) const noexcept {
    if (object) close(&object->fid, type_name<T>());
  }
  template <class T>
  static constexpr const char* type_name() {
    if constexpr (std::is_same_v<T, fid_fabric>)
      return "fabric";
    else if constexpr (std::is_same_v<T, fid_domain>)
      return "domain";
    else if constexpr (std::is_same_v<T, fid_av>)
      return "address vector";
    else if constexpr (std::is_same_v<T, fid_cq>)
      return "completion queue";
    else if constexpr (std::is_same_v<T, fid_ep>)
      return "endpoint";
    else if constexpr (std::is_same_v<T, fid_mr>)
      return "memory registration";
    else
      return "fid";
  }
};

template <class T>
using FidPtr = std::unique_ptr<T, FidCloser>;
using FabricPtr = FidPtr<fid_fabric>;
using DomainPtr = FidPtr<fid_domain>;
using AvPtr = FidPtr<fid_av>;
using CqPtr = FidPtr<fid_cq>;
using EndpointPtr = FidPtr<fid_ep>;
using MrPtr = FidPtr<fid_mr>;

struct InfoDeleter {
  void operator()(fi_info* info) const noexcept { fabric_freeinfo(info); }
};
/// An fi_info list or a single fi_dupinfo copy.
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

/// The provider's name of an fi_info ("tcp;ofi_rxm"), empty when it has none.
inline std::string provider_name(const fi_info& info) {
  return info.fabric_attr && info.fabric_attr->prov_name ? info.fabric_attr->prov_name : "";
}

}  // namespace ddstage::detail
