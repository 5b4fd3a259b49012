#include "lazy_region.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/shard_loader.hpp"

namespace ddstage {

LazyRegion::LazyRegion(const Index& index, ShardLayout layout, std::span<std::byte> region,
                       LazyRegionOptions options)
    : m_index(&index),
      m_layout(std::move(layout)),
      m_region(region),
      m_options(options),
      m_staged(m_layout.range().count(), false),
      m_claimed(m_layout.range().count(), false) {
  m_layout.write_tables(m_region);
}

LazyRegion::~LazyRegion() {
  stop_prefetch();
}

ShardRange LazyRegion::unit_of(uint64_t sample) const noexcept {
  const ShardRange range = m_layout.range();
  const auto fields = static_cast<uint32_t>(m_index->fields().size());
  ShardRange unit{sample, sample + 1};
  // Blocks of different fields may overlap without lining up (rows of different sizes get
  // different rows per block): widen until no block crosses either edge. A block crossing an
  // edge holds the row next to it, so the edges are all there is to look at.
  for (bool widened = true; widened;) {
    widened = false;
    for (uint32_t f = 0; f < fields; ++f) {
      const Block head = m_index->block(unit.first, f);
      const Block tail = m_index->block(unit.last - 1, f);
      const uint64_t first = std::max(head.first_sample, range.first);
      const uint64_t last = std::min(tail.first_sample + tail.rows, range.last);
      widened = widened || first < unit.first || last > unit.last;
      unit = {std::min(unit.first, first), std::max(unit.last, last)};
    }
  }
  return unit;
}

void LazyRegion::claim(ShardRange unit) {
  for (uint64_t s = unit.first; s < unit.last; ++s) m_claimed[slot(s)] = true;
}

void LazyRegion::stage(std::span<const uint64_t> ids) {
  const ShardRange range = m_layout.range();
  for (uint64_t id : ids) {
    if (id < range.first || id >= range.last) {
      throw UsageError(fmt::format("sample {} is not in this region (samples {} to {})", id,
                                   range.first, range.last - 1));
    }
  }
  if (complete()) return;
  std::vector<uint64_t> wanted(ids.begin(), ids.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<ShardRange> mine;
  std::unique_lock lock(m_mutex);
  for (;;) {
    mine.clear();
    bool others = false;             // some of ids are being fetched by another call
    uint64_t covered = range.first;  // ids below it lie in units this pass claimed
    for (uint64_t id : wanted) {
      if (id < covered || m_staged[slot(id)]) continue;
      if (m_claimed[slot(id)]) {
        others = true;
        continue;
      }
      const ShardRange unit = unit_of(id);
      claim(unit);
      mine.push_back(unit);
      covered = unit.last;
    }
    if (!mine.empty()) {
      lock.unlock();
      fill_claimed(mine);
      lock.lock();
    } else if (others) {
      // Woken when any claim ends; one that ended in failure leaves its units free, and the
      // next pass claims them (and meets the failure itself if it persists).
      m_changed.wait(lock);
    } else {
      return;
    }
  }
}

void LazyRegion::fill_claimed(std::span<const ShardRange> units) {
  try {
    fill(units);
  } catch (...) {
    {
      std::lock_guard lock(m_mutex);
      for (const auto& unit : units) {
        for (uint64_t s = unit.first; s < unit.last; ++s) m_claimed[slot(s)] = false;
      }
    }
    m_changed.notify_all();
    throw;
  }
  uint64_t samples = 0;
  {
    std::lock_guard lock(m_mutex);
    for (const auto& unit : units) {
      for (uint64_t s = unit.first; s < unit.last; ++s) {
        m_claimed[slot(s)] = false;
        m_staged[slot(s)] = true;
      }
      samples += unit.count();
    }
    // Under the lock, with the bits: a caller that sees complete() sees the bits too.
    m_staged_count.fetch_add(samples, std::memory_order_release);
  }
  m_changed.notify_all();
}

void LazyRegion::fill(std::span<const ShardRange> units) {
  if (!m_options.allow_stale) check_sources(units);
  // Checked above on every fill, not once per file as the reader would: a lazy region is
  // filled over a whole run of training, and a source changed meanwhile must be refused.
  OriginReader reader(*m_index, {.allow_stale = true});
  const auto fields = static_cast<uint32_t>(m_index->fields().size());
  std::vector<EntryRead> reads;
  uint64_t samples = 0;
  for (const auto& unit : units) {
    // Sample-major: the fields of one sample often sit together in the file.
    for (uint64_t s = unit.first; s < unit.last; ++s) {
      for (uint32_t f = 0; f < fields; ++f)
        reads.push_back({s, f, m_region.data() + m_layout.row_offset(s, f)});
    }
    samples += unit.count();
  }
  reader.read_entries(reads);
  m_origin_reads.fetch_add(samples, std::memory_order_relaxed);
  if (!m_options.verify) return;
  std::vector<std::byte> scratch;
  for (const auto& unit : units)
    verify_shard_rows(*m_index, m_layout, m_region.data(), unit, reader, scratch);
}

void LazyRegion::check_sources(std::span<const ShardRange> units) const {
  std::vector<uint32_t> files;
  for (uint32_t f = 0; f < m_index->fields().size(); ++f) {
    for (const auto& unit : units) {
      // A run's rows share one file: one look per run.
      for (uint64_t s = unit.first; s < unit.last; s = m_index->run_end(s, f))
        files.push_back(m_index->entry(s, f).file);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  for (uint32_t file : files) m_index->check_fresh(file);
}

void LazyRegion::start_prefetch() {
  if (m_prefetch.joinable()) return;
  m_prefetch = std::jthread([this](const std::stop_token& stop) { prefetch(stop); });
}

void LazyRegion::stop_prefetch() noexcept {
  if (!m_prefetch.joinable()) return;
  m_prefetch.request_stop();
  m_prefetch.join();
  std::lock_guard lock(m_mutex);
  m_prefetch_error = nullptr;
}

void LazyRegion::wait_prefetch() {
  if (m_prefetch.joinable()) m_prefetch.join();
  std::exception_ptr error;
  {
    std::lock_guard lock(m_mutex);
    std::swap(error, m_prefetch_error);
  }
  if (error) std::rethrow_exception(error);
}

void LazyRegion::prefetch(const std::stop_token& stop) {
  const ShardRange range = m_layout.range();
  const auto fields = static_cast<uint32_t>(m_index->fields().size());
  std::vector<ShardRange> mine;
  try {
    for (uint64_t next = range.first; next < range.last && !stop.stop_requested();) {
      mine.clear();
      {
        std::lock_guard lock(m_mutex);
        // At least one unit a chunk, whatever the chunk's size.
        for (uint64_t bytes = 0;
             next < range.last && (mine.empty() || bytes < m_options.prefetch_chunk_bytes);) {
          if (m_staged[slot(next)] || m_claimed[slot(next)]) {
            ++next;
            continue;
          }
          const ShardRange unit = unit_of(next);
          claim(unit);
          mine.push_back(unit);
          for (; next < unit.last; ++next) {
            for (uint32_t f = 0; f < fields; ++f) bytes += m_index->entry(next, f).length;
          }
        }
      }
      if (!mine.empty()) fill_claimed(mine);
    }
  } catch (...) {
    std::lock_guard lock(m_mutex);
    m_prefetch_error = std::current_exception();
  }
}

}  // namespace ddstage
