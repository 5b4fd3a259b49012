#include "ddstage/tool/checksum.hpp"

#include <xxhash.h>

namespace ddstage {

uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace ddstage
