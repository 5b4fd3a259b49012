#include "fabric/fabric_handles.hpp"

#include <cerrno>
#include <cstdlib>

#include <spdlog/spdlog.h>

namespace ddstage::detail {

namespace {

bool region_withdrawal_can_cause(int code, int provider_code) noexcept {
  // tcp;ofi_rxm 1.17 answers a read of a closed registration by cancelling it with ENOENT
  // (no such key) and dropping the connection, which fails the other reads in flight with
  // ENOTCONN (as the code or, cancelled, as the provider's code), as a killed server's do;
  // later providers refuse the key; shm finds the region unmapped. Anything else (a refused
  // connection, a time-out) is not a replace.
  if (provider_code == ENOENT || provider_code == ENOTCONN) return true;
  switch (code) {
    case FI_EKEYREJECTED:
    case EACCES:
    case EPERM:
    case EINVAL:
    case EFAULT:
    case ENOTCONN:
      return true;
    default:
      return false;
  }
}

}  // namespace

FabricError::FabricError(const std::string& call, const std::string& provider, int rc,
                         ErrorContext context, const std::string& detail, int provider_code)
    : TransportError(call + " failed" + (provider.empty() ? "" : " (provider " + provider + ")") +
                         ": " + fabric_strerror(-rc) + (detail.empty() ? "" : ": " + detail),
                     std::move(context), region_withdrawal_can_cause(-rc, std::abs(provider_code))),
      m_code(-rc) {}

void FidCloser::close(fid_t fid, const char* what) const noexcept {
  if (const int rc = fi_close(fid); rc != 0)
    spdlog::warn("closing the libfabric {}: {}", what, fabric_strerror(-rc));
}

}  // namespace ddstage::detail
