// The checksum every index entry carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ddstage {

/// xxh3-64 of bytes, seed 0: the algorithm named "xxh3-64" in manifest.yaml.
uint64_t checksum(std::span<const std::byte> bytes) noexcept;

}  // namespace ddstage
