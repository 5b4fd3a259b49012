#include "ddstage/tool/origin_reader.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "ddstage/error.hpp"
#include "ddstage/tool/checksum.hpp"

namespace ddstage {
namespace {

/// Largest coalesced pread that goes through the scratch buffer; bounds its memory.
constexpr uint64_t max_run_bytes = 8ull << 20;
/// Shorter runs are pread into the destination file's mapping: below a page, the two splice
/// calls cost more than the page fault they would spare.
constexpr uint64_t min_splice_bytes = 4096;

}  // namespace

OriginReader::OriginReader(const Index& index, OriginReaderOptions options)
    : m_index(&index), m_options(options), m_checked(index.files().size(), false) {
  if (m_options.max_open_files == 0) {
    m_options.max_open_files = std::clamp<std::size_t>(open_file_limit() / 4, 1, 1024);
  }
}

void OriginReader::check_ids(std::span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    if (id >= m_index->samples()) {
      throw UsageError("sample id " + std::to_string(id) + " is out of range (dataset '" +
                       m_index->manifest().name + "' has " + std::to_string(m_index->samples()) +
                       " samples)");
    }
  }
}

uint64_t OriginReader::batch_bytes(uint32_t field, std::span<const uint64_t> ids) const {
  check_ids(ids);
  uint64_t total = 0;
  for (uint64_t id : ids) total += m_index->entry(id, field).length;
  return total;
}

uint64_t OriginReader::sample_bytes(uint64_t sample) const {
  check_ids({&sample, 1});
  uint64_t total = 0;
  for (uint32_t f = 0; f < m_index->fields().size(); ++f) total += m_index->entry(sample, f).length;
  return total;
}

const FileDescriptor& OriginReader::fd_for(uint32_t file) {
  auto it = m_fds.find(file);
  if (it != m_fds.end()) return it->second;
  // Freshness is checked once per file per reader, when it is first opened.
  if (!m_options.allow_stale && !m_checked[file]) {
    m_index->check_fresh(file);
    m_checked[file] = true;
  }
  if (m_fds.size() >= m_options.max_open_files) m_fds.clear();
  return m_fds.emplace(file, FileDescriptor::open(m_index->resolve(file), O_RDONLY)).first->second;
}

void OriginReader::read(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest) {
  const uint64_t need = batch_bytes(field, ids);
  if (dest.size() != need) {
    throw UsageError("destination holds " + std::to_string(dest.size()) +
                     " bytes; the batch needs " + std::to_string(need));
  }
  m_requests.clear();
  std::byte* at = dest.data();
  for (uint64_t id : ids) {
    const Entry& e = m_index->entry(id, field);
    m_requests.push_back({&e, at, id, field});
    at += e.length;
  }
  execute();
}

void OriginReader::read_sample(uint64_t sample, std::span<std::byte> dest) {
  if (dest.size() != sample_bytes(sample)) {
    throw UsageError("destination holds " + std::to_string(dest.size()) + " bytes; sample " +
                     std::to_string(sample) + " needs " + std::to_string(sample_bytes(sample)));
  }
  m_requests.clear();
  std::byte* at = dest.data();
  for (uint32_t f = 0; f < m_index->fields().size(); ++f) {
    const Entry& e = m_index->entry(sample, f);
    m_requests.push_back({&e, at, sample, f});
    at += e.length;
  }
  execute();
}

void OriginReader::read_entries(std::span<const EntryRead> reads) {
  m_requests.clear();
  for (const auto& r : reads) {
    check_ids({&r.sample, 1});
    if (r.field >= m_index->fields().size())
      throw std::logic_error("OriginReader: field out of range");
    m_requests.push_back({&m_index->entry(r.sample, r.field), r.dest, r.sample, r.field});
  }
  execute();
}

void OriginReader::execute() {
  // File order: sequential on disk even when the batch is shuffled.
  std::sort(m_requests.begin(), m_requests.end(), [](const Request& a, const Request& b) {
    return a.entry->file != b.entry->file ? a.entry->file < b.entry->file
                                          : a.entry->offset < b.entry->offset;
  });
  std::size_t begin = 0;
  while (begin < m_requests.size()) {
    std::size_t end = begin + 1;
    uint64_t run_bytes = m_requests[begin].entry->length;
    while (end < m_requests.size()) {
      const Entry& prev = *m_requests[end - 1].entry;
      const Entry& next = *m_requests[end].entry;
      if (next.file != prev.file || next.offset != prev.offset + prev.length ||
          run_bytes + next.length > max_run_bytes) {
        break;
      }
      run_bytes += next.length;
      ++end;
    }
    read_run(begin, end);
    begin = end;
  }
  if (!m_options.verify) return;
  for (const auto& r : m_requests) {
    if (checksum({r.dest, r.entry->length}) != r.entry->checksum) {
      throw ChecksumError("checksum mismatch reading " + m_index->resolve(r.entry->file).string(),
                          {.sample = r.sample, .field = m_index->fields()[r.field].name});
    }
  }
}

/// Requests [begin, end) are adjacent in one file: read at once, straight into the destination
/// when the destinations are adjacent too, else with one pread into the scratch buffer.
void OriginReader::read_run(std::size_t begin, std::size_t end) {
  const Entry& first = *m_requests[begin].entry;
  const auto& fd = fd_for(first.file);
  if (end - begin == 1) return read_into(fd, first.offset, {m_requests[begin].dest, first.length});
  const Entry& last = *m_requests[end - 1].entry;
  const uint64_t bytes = last.offset + last.length - first.offset;
  bool dest_adjacent = true;
  for (std::size_t i = begin + 1; i < end && dest_adjacent; ++i) {
    dest_adjacent = m_requests[i].dest == m_requests[i - 1].dest + m_requests[i - 1].entry->length;
  }
  if (dest_adjacent) return read_into(fd, first.offset, {m_requests[begin].dest, bytes});
  m_scratch.resize(bytes);
  fd.pread_exact(m_scratch, first.offset);
  for (std::size_t i = begin; i < end; ++i) {
    const Entry& e = *m_requests[i].entry;
    // A run of empty rows leaves the scratch buffer empty (null data): memcpy must not see it.
    if (e.length)
      std::memcpy(m_requests[i].dest, m_scratch.data() + (e.offset - first.offset), e.length);
  }
}

void OriginReader::read_into(const FileDescriptor& fd, uint64_t offset, std::span<std::byte> dest) {
  const auto& to = m_options.destination;
  if (to.file && dest.size() >= min_splice_bytes &&
      m_splice.copy(fd, offset, *to.file, static_cast<uint64_t>(dest.data() - to.base),
                    dest.size())) {
    return;
  }
  fd.pread_exact(dest, offset);
}

bool OriginReader::read_and_check(uint64_t sample, uint32_t field, std::span<std::byte> dest) {
  check_ids({&sample, 1});
  if (field >= m_index->fields().size()) throw std::logic_error("OriginReader: field out of range");
  const Entry& e = m_index->entry(sample, field);
  if (dest.size() < e.length) {
    throw UsageError("destination holds " + std::to_string(dest.size()) + " bytes; sample " +
                     std::to_string(sample) + " needs " + std::to_string(e.length));
  }
  fd_for(e.file).pread_exact(dest.first(e.length), e.offset);
  return checksum(dest.first(e.length)) == e.checksum;
}

}  // namespace ddstage
