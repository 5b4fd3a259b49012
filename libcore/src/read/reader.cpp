// The public Reader: a store's BatchReader or an OriginBatchReader, behind one interface.
#include "ddstage/client.hpp"
#include "read/reader_backend.hpp"

namespace ddstage {

Reader::Reader(std::unique_ptr<detail::ReaderBackend> reader) : m(std::move(reader)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

uint64_t Reader::batch_bytes(const std::string& field, std::span<const uint64_t> ids) const {
  return m->batch_bytes(field, ids);
}

void Reader::row_sizes(const std::string& field, std::span<const uint64_t> ids,
                       std::span<uint64_t> sizes) const {
  m->row_sizes(field, ids, sizes);
}

void Reader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                       std::span<std::byte> dest, bool verify) {
  m->get_batch(field, ids, dest, verify);
}

void Reader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                       const DeviceBuffer& dest, bool verify) {
  m->get_batch(field, ids, dest, verify);
}

}  // namespace ddstage
