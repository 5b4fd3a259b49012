// The timing loop every bench store cell runs: threads reading their share of the rows in
// calls of one batch size, each call's time per row into a histogram.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "bench/bench_report.hpp"

namespace ddstage::cli {

/// Reads the rows of ids into the caller's own buffer; returns the bytes read.
using ReadFn = std::function<uint64_t(std::span<const uint64_t> ids)>;

/// How a cell reads: rows per call, threads, and whether the threads share one reader.
struct CellShape {
  uint64_t batch = 1;
  unsigned threads = 1;
  /// One reader for all threads behind a std::mutex (what readers must not do), instead of
  /// a reader each.
  bool shared = false;
};

/// Times one cell: ids are split into one contiguous share per thread; each thread reads its
/// share in calls of shape.batch through make_reader(thread) (shared: make_reader(0), called
/// under one lock), starting together. Fills cell.rows, bytes, seconds (wall time from the
/// common start until the last thread ends) and ns_per_row (each call's time over its rows,
/// lock wait included).
void run_cell(BenchCell& cell, std::span<const uint64_t> ids, const CellShape& shape,
              const std::function<ReadFn(unsigned thread)>& make_reader);

}  // namespace ddstage::cli

namespace ddstage::cli {

/// The floor for shared memory: the same rows' bytes copied with memcpy from random places of
/// one large buffer (so they come from memory, not cache).
class MemcpyFloor {
 public:
  /// source_bytes: the dataset's size (the buffer takes at most 1 GiB of it, and at least the
  /// largest row: the caller's rows must fit); length_of(id): the bytes of row id.
  MemcpyFloor(uint64_t source_bytes, std::function<uint64_t(uint64_t id)> length_of);
  /// A reader copying into its own buffer; shares the source.
  ReadFn reader() const;

 private:
  std::shared_ptr<const std::vector<std::byte>> m_source;
  std::function<uint64_t(uint64_t)> m_length_of;
};

/// Reads ids once through readers[0] in calls of 128, and one call through each other reader,
/// so that page faults and lazy connections land before the first cell.
void warm_up(const std::vector<ReadFn>& readers, std::span<const uint64_t> ids);

}  // namespace ddstage::cli
