#include "ddstage/origin_reader.hpp"

#include <fcntl.h>

#include <algorithm>
#include <numeric>

#include "ddstage/checksum.hpp"
#include "ddstage/error.hpp"

namespace ddstage {

OriginReader::OriginReader(const Index& index, OriginReaderOptions options)
    : m_index(&index), m_options(options) {}

void OriginReader::check_ids(std::span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    if (id >= m_index->samples()) {
      throw UsageError("sample id " + std::to_string(id) + " is out of range (dataset '" +
                       m_index->manifest().name + "' has " + std::to_string(m_index->samples()) + " samples)");
    }
  }
}

uint64_t OriginReader::batch_bytes(uint32_t field, std::span<const uint64_t> ids) const {
  check_ids(ids);
  uint64_t total = 0;
  for (uint64_t id : ids) total += m_index->entry(id, field).length;
  return total;
}

const FileDescriptor& OriginReader::fd_for(uint32_t file) {
  auto it = m_fds.find(file);
  if (it != m_fds.end()) return it->second;
  // Freshness is checked once per file per reader, when it is first opened.
  if (!m_options.allow_stale) m_index->check_fresh(file);
  return m_fds.emplace(file, FileDescriptor::open(m_index->resolve(file), O_RDONLY)).first->second;
}

void OriginReader::read(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest) {
  const uint64_t need = batch_bytes(field, ids);
  if (dest.size() != need) {
    throw UsageError("destination holds " + std::to_string(dest.size()) + " bytes; the batch needs " +
                     std::to_string(need));
  }
  m_dest_offsets.resize(ids.size());
  uint64_t at = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    m_dest_offsets[i] = at;
    at += m_index->entry(ids[i], field).length;
  }
  // Issue the preads in file order: sequential on disk even when the batch is shuffled.
  m_order.resize(ids.size());
  std::iota(m_order.begin(), m_order.end(), 0u);
  std::sort(m_order.begin(), m_order.end(), [&](uint32_t a, uint32_t b) {
    const auto& ea = m_index->entry(ids[a], field);
    const auto& eb = m_index->entry(ids[b], field);
    return ea.file != eb.file ? ea.file < eb.file : ea.offset < eb.offset;
  });
  for (uint32_t i : m_order) {
    const Entry& e = m_index->entry(ids[i], field);
    auto out = dest.subspan(m_dest_offsets[i], e.length);
    fd_for(e.file).pread_exact(out, e.offset);
    if (m_options.verify && checksum(out) != e.checksum) {
      throw ChecksumError("checksum mismatch reading " + m_index->resolve(e.file).string(),
                          {.sample = ids[i], .field = m_index->fields()[field].name});
    }
  }
}

bool OriginReader::read_and_check(uint64_t sample, uint32_t field, std::span<std::byte> dest) {
  const Entry& e = m_index->entry(sample, field);
  fd_for(e.file).pread_exact(dest.first(e.length), e.offset);
  return checksum(dest.first(e.length)) == e.checksum;
}

}  // namespace ddstage
