// The checksum every index entry and block carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ddstage {

/// xxh3-64 of bytes, seed 0: the algorithm named "xxh3-64" in manifest.yaml.
uint64_t checksum(std::span<const std::byte> bytes) noexcept;

/// The same over bytes handed in pieces (a block's rows): equal to checksum() of the pieces
/// back to back.
class StreamingChecksum {
 public:
  StreamingChecksum();
  StreamingChecksum(StreamingChecksum&&) noexcept;
  StreamingChecksum& operator=(StreamingChecksum&&) noexcept;
  ~StreamingChecksum();
  void update(std::span<const std::byte> bytes) noexcept;
  /// The checksum of everything since the last reset, which it then starts again.
  uint64_t digest_and_reset() noexcept;

 private:
  struct State;
  std::unique_ptr<State> m;
};

}  // namespace ddstage
