// What a public Reader reads through: a store's routes (BatchReader) or the origin files
// themselves (OriginBatchReader), so one Reader type, and one Python binding, serves both.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ddstage/device_buffer.hpp"

namespace ddstage::detail {

class ReaderBackend {
 public:
  virtual ~ReaderBackend() = default;
  virtual uint64_t batch_bytes(const std::string& field, std::span<const uint64_t> ids) const = 0;
  virtual void row_sizes(const std::string& field, std::span<const uint64_t> ids,
                         std::span<uint64_t> sizes) const = 0;
  virtual void get_batch(const std::string& field, std::span<const uint64_t> ids,
                         std::span<std::byte> dest, bool verify) = 0;
  virtual void get_batch(const std::string& field, std::span<const uint64_t> ids,
                         const DeviceBuffer& dest, bool verify) = 0;
};

}  // namespace ddstage::detail
