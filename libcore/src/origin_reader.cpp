#include "ddstage/tool/origin_reader.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

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
    const Entry e = m_index->entry(id, field);
    m_requests.push_back({e, at, id, field});
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
    const Entry e = m_index->entry(sample, f);
    m_requests.push_back({e, at, sample, f});
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
    m_requests.push_back({m_index->entry(r.sample, r.field), r.dest, r.sample, r.field});
  }
  execute();
}

void OriginReader::execute() {
  // File order: sequential on disk even when the batch is shuffled.
  std::sort(m_requests.begin(), m_requests.end(), [](const Request& a, const Request& b) {
    return a.entry.file != b.entry.file ? a.entry.file < b.entry.file
                                        : a.entry.offset < b.entry.offset;
  });
  std::size_t begin = 0;
  while (begin < m_requests.size()) {
    std::size_t end = begin + 1;
    uint64_t run_bytes = m_requests[begin].entry.length;
    while (end < m_requests.size()) {
      const Entry& prev = m_requests[end - 1].entry;
      const Entry& next = m_requests[end].entry;
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
  if (m_options.verify) verify_requests();
}

void OriginReader::throw_mismatch(const Request& r, const Block& block) const {
  const std::string rows = block.rows == 1
                               ? std::string()
                               : fmt::format(" (block of samples {}..{})", block.first_sample,
                                             block.first_sample + block.rows - 1);
  throw ChecksumError("checksum mismatch reading " + m_index->resolve(r.entry.file).string() + rows,
                      {.sample = r.sample, .field = m_index->fields()[r.field].name});
}

void OriginReader::verify_requests() {
  m_grouped.clear();
  for (std::size_t i = 0; i < m_requests.size(); ++i) {
    const auto& r = m_requests[i];
    const Block b = m_index->block(r.sample, r.field);
    if (b.rows > 1) {
      m_grouped.push_back(i);
    } else if (checksum({r.dest, r.entry.length}) != b.checksum) {
      throw_mismatch(r, b);
    }
  }
  // Rows of multi-row blocks: each block read and hashed once, then every row asked of it
  // compared with the verified bytes.
  const auto block_of = [this](std::size_t i) {
    const auto& r = m_requests[i];
    return std::pair(r.field, m_index->block(r.sample, r.field).first_sample);
  };
  // Then by sample: a damaged block is reported at the lowest sample asked of it, every time.
  std::sort(m_grouped.begin(), m_grouped.end(), [&](std::size_t a, std::size_t b) {
    const auto block_a = block_of(a);
    const auto block_b = block_of(b);
    return block_a != block_b ? block_a < block_b : m_requests[a].sample < m_requests[b].sample;
  });
  Block block{};
  uint32_t block_field = 0;
  bool have_block = false;
  for (std::size_t i : m_grouped) {
    const auto& r = m_requests[i];
    if (!have_block || block_of(i) != std::pair(block_field, block.first_sample)) {
      have_block = true;
      block = m_index->block(r.sample, r.field);
      block_field = r.field;
      if (!read_block(r.field, block, m_block)) throw_mismatch(r, block);
    }
    const uint64_t at = (r.sample - block.first_sample) * r.entry.length;
    if (r.entry.length && std::memcmp(r.dest, m_block.data() + at, r.entry.length) != 0)
      throw_mismatch(r, block);
  }
}

bool OriginReader::read_block(uint32_t field, const Block& block, std::vector<std::byte>& bytes) {
  // A block lies in one run: one file, rows of one length at a fixed stride.
  const Entry first = m_index->entry(block.first_sample, field);
  const uint64_t stride =
      block.rows > 1 ? m_index->entry(block.first_sample + 1, field).offset - first.offset : 0;
  bytes.resize(block.rows * first.length);
  const auto& fd = fd_for(first.file);
  if (stride == first.length) {
    fd.pread_exact(bytes, first.offset);
  } else {
    for (uint64_t i = 0; i < block.rows; ++i) {
      fd.pread_exact(std::span(bytes).subspan(i * first.length, first.length),
                     first.offset + i * stride);
    }
  }
  return checksum(bytes) == block.checksum;
}

/// Requests [begin, end) are adjacent in one file: read at once, straight into the destination
/// when the destinations are adjacent too, else with one pread into the scratch buffer.
void OriginReader::read_run(std::size_t begin, std::size_t end) {
  const Entry& first = m_requests[begin].entry;
  const auto& fd = fd_for(first.file);
  if (end - begin == 1) return read_into(fd, first.offset, {m_requests[begin].dest, first.length});
  const Entry& last = m_requests[end - 1].entry;
  const uint64_t bytes = last.offset + last.length - first.offset;
  bool dest_adjacent = true;
  for (std::size_t i = begin + 1; i < end && dest_adjacent; ++i) {
    dest_adjacent = m_requests[i].dest == m_requests[i - 1].dest + m_requests[i - 1].entry.length;
  }
  if (dest_adjacent) return read_into(fd, first.offset, {m_requests[begin].dest, bytes});
  m_scratch.resize(bytes);
  fd.pread_exact(m_scratch, first.offset);
  for (std::size_t i = begin; i < end; ++i) {
    const Entry& e = m_requests[i].entry;
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
  const Entry e = m_index->entry(sample, field);
  if (dest.size() < e.length) {
    throw UsageError("destination holds " + std::to_string(dest.size()) + " bytes; sample " +
                     std::to_string(sample) + " needs " + std::to_string(e.length));
  }
  fd_for(e.file).pread_exact(dest.first(e.length), e.offset);
  return check_row(sample, field, dest.first(e.length));
}

bool OriginReader::check_row(uint64_t sample, uint32_t field, std::span<const std::byte> row) {
  const Block b = m_index->block(sample, field);
  if (b.rows == 1) return checksum(row) == b.checksum;
  auto it = m_verified_rows.find({field, b.first_sample});
  if (it == m_verified_rows.end()) {
    if (!read_block(field, b, m_block)) return false;
    const uint64_t length = m_block.size() / b.rows;
    std::vector<uint64_t> sums(b.rows);
    for (uint64_t i = 0; i < b.rows; ++i)
      sums[i] = checksum(std::span(m_block).subspan(i * length, length));
    it = m_verified_rows.emplace(std::pair(field, b.first_sample), std::move(sums)).first;
  }
  return checksum(row) == it->second[sample - b.first_sample];
}

}  // namespace ddstage
