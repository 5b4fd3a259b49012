#include "ddstage/tool/checksum.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t as a complete type, held by value
#include <xxhash.h>

namespace ddstage {

uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct StreamingChecksum::State {
  XXH3_state_t state;  // 64-byte aligned by its declaration
};

StreamingChecksum::StreamingChecksum() : m(std::make_unique<State>()) {
  XXH3_64bits_reset(&m->state);
}
StreamingChecksum::StreamingChecksum(StreamingChecksum&&) noexcept = default;
StreamingChecksum& StreamingChecksum::operator=(StreamingChecksum&&) noexcept = default;
StreamingChecksum::~StreamingChecksum() = default;

void StreamingChecksum::update(std::span<const std::byte> bytes) noexcept {
  XXH3_64bits_update(&m->state, bytes.data(), bytes.size());
}

uint64_t StreamingChecksum::digest_and_reset() noexcept {
  const uint64_t digest = XXH3_64bits_digest(&m->state);
  XXH3_64bits_reset(&m->state);
  return digest;
}

}  // namespace ddstage
