#include "read/origin_batch_reader.hpp"

#include "read/read_batch.hpp"

namespace ddstage::detail {

OriginBatchReader::OriginBatchReader(std::shared_ptr<const Index> index, const Settings& settings)
    : m_index(std::move(index)),
      m_allow_stale(settings.get_bool("origin.allow_stale")),
      m_gpu_path(settings.get_string("gpu.path")) {}

uint64_t OriginBatchReader::batch_bytes(const std::string& field,
                                        std::span<const uint64_t> ids) const {
  const uint32_t f = field_of(*m_index, field);
  check_ids(*m_index, ids);
  return bytes_of(*m_index, f, ids);
}

void OriginBatchReader::row_sizes(const std::string& field, std::span<const uint64_t> ids,
                                  std::span<uint64_t> sizes) const {
  row_sizes_of(*m_index, field, ids, sizes);
}

OriginReader& OriginBatchReader::origin(bool verify) {
  auto& reader = verify ? m_checked : m_plain;
  if (!reader)
    reader.emplace(*m_index, OriginReaderOptions{.verify = verify, .allow_stale = m_allow_stale});
  return *reader;
}

void OriginBatchReader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                                  std::span<std::byte> dest, bool verify) {
  const CheckedBatch batch = check_batch(*m_index, field, ids, dest.size());
  origin(verify).read(batch.field, ids, dest);
}

void OriginBatchReader::get_batch(const std::string& field, std::span<const uint64_t> ids,
                                  const DeviceBuffer& dest, bool verify) {
  const uint32_t f = field_of(*m_index, field);
  check_ids(*m_index, ids);
  if (!m_gpu) m_gpu.emplace(m_gpu_path);
  m_gpu->begin(dest, bytes_of(*m_index, f, ids));
  m_gpu->choose("its rows are read from the origin files, not from mapped memory");
  const auto host = m_gpu->bounce(dest.bytes);
  origin(verify).read(f, ids, host.first(dest.bytes));
  m_gpu->finish_staged(dest);
}

}  // namespace ddstage::detail
