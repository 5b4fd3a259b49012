#include "fabric/fabric_handles.hpp"

#include <spdlog/spdlog.h>

namespace ddstage::detail {

FabricError::FabricError(const std::string& call, const std::string& provider, int rc, ErrorContext context,
                         const std::string& detail)
    : Error(ErrorKind::runtime,
            call + " failed" + (provider.empty() ? "" : " (provider " + provider + ")") + ": " + fi_strerror(-rc) +
                (detail.empty() ? "" : ": " + detail),
            std::move(context)),
      m_code(-rc) {}

void FidCloser::close(fid_t fid, const char* what) const noexcept {
  if (const int rc = fi_close(fid); rc != 0) spdlog::warn("closing the libfabric {}: {}", what, fi_strerror(-rc));
}

}  // namespace ddstage::detail
