#include "fabric/fabric_region.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace ddstage::detail {
namespace {

uint64_t random_key(std::size_t key_bytes) {
  uint64_t key = 0;
  if (::getrandom(&key, sizeof key, 0) != static_cast<ssize_t>(sizeof key))
    throw IoError("getrandom", errno);
  return key_bytes >= sizeof key ? key : key & ((uint64_t{1} << (8 * key_bytes)) - 1);
}

}  // namespace

FabricRegion::FabricRegion(FabricEndpoint& endpoint, std::span<const std::byte> memory) {
  const fi_info& info = endpoint.info();
  const bool provider_keys = endpoint.mr_mode(FI_MR_PROV_KEY);
  const std::size_t key_bytes =
      info.domain_attr->mr_key_size ? info.domain_attr->mr_key_size : sizeof(uint64_t);
  // Our own keys must be unique in the domain: draw again when one is taken.
  for (int attempt = 0;; ++attempt) {
    try {
      m_mr = endpoint.register_memory(memory.data(), memory.size(), FI_REMOTE_READ,
                                      provider_keys ? 0 : random_key(key_bytes));
      break;
    } catch (const FabricError& e) {
      if (provider_keys || e.native_code() != FI_ENOKEY || attempt == 8) throw;
    }
  }
  m_info.key = fi_mr_key(m_mr.get());
  m_info.base = endpoint.mr_mode(FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(memory.data()) : 0;
  m_info.bytes = memory.size();
}

}  // namespace ddstage::detail
