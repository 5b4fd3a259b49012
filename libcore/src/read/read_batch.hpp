// Checks and planning every reader of shard regions does per batch (Client readers, the
// embedded Store): header-only so that MPI-free and MPI builds share one definition.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/checksum.hpp"
#include "ddstage/tool/placement.hpp"
#include "transport/transport.hpp"

namespace ddstage::detail {

/// Field id by name, building the list of names only when the name is unknown: get_batch
/// calls this once per batch and must not allocate.
inline uint32_t field_of(const Index& index, const std::string& name) {
  const auto fields = index.fields();
  for (uint32_t f = 0; f < fields.size(); ++f) {
    if (fields[f].name == name) return f;
  }
  return index.field_id(name);  // throws the UsageError listing the fields
}

/// UsageError for the first id that is not a sample of index.
inline void check_ids(const Index& index, std::span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    if (id >= index.samples()) {
      throw UsageError(fmt::format("sample id {} is out of range (dataset '{}' has {} samples)", id,
                                   index.manifest().name, index.samples()));
    }
  }
}

/// Bytes of field for ids, which the caller checked.
inline uint64_t bytes_of(const Index& index, uint32_t field, std::span<const uint64_t> ids) {
  const FieldInfo& info = index.fields()[field];
  if (!info.variable) return info.row_bytes * ids.size();
  uint64_t total = 0;
  for (uint64_t id : ids) total += index.entry(id, field).length;
  return total;
}

/// What a batch's checks found: the field's id and the bytes the batch needs.
struct CheckedBatch {
  uint32_t field;
  uint64_t bytes;
};

/// The checks every batch read makes before a row moves (Reader::get_batch and the embedded
/// Store's get_batch_collective): the field exists, the ids are samples, and the destination
/// holds exactly the batch. UsageError for the first that fails.
inline CheckedBatch check_batch(const Index& index, const std::string& field,
                                std::span<const uint64_t> ids, std::size_t dest_bytes) {
  const uint32_t f = field_of(index, field);
  check_ids(index, ids);
  const uint64_t need = bytes_of(index, f, ids);
  if (dest_bytes != need) {
    throw UsageError(
        fmt::format("destination holds {} bytes; the batch needs {}", dest_bytes, need));
  }
  return {f, need};
}

/// Per-id sizes of a field: what a caller sizes variable-length destinations with.
inline void row_sizes_of(const Index& index, const std::string& field,
                         std::span<const uint64_t> ids, std::span<uint64_t> sizes) {
  const uint32_t f = field_of(index, field);
  if (sizes.size() != ids.size()) {
    throw UsageError(fmt::format("sizes holds {} values for {} ids", sizes.size(), ids.size()));
  }
  check_ids(index, ids);
  for (std::size_t i = 0; i < ids.size(); ++i) sizes[i] = index.entry(ids[i], f).length;
}

/// Appends a read of one row, merged into the previous read when it continues it in the same
/// rank's region and in dest: rows of consecutive samples lie back to back in a region, so a
/// run of consecutive ids of one rank becomes one read (one memcpy, one MPI_Get, one fi_read).
inline void append_read(std::vector<ReadOp>& reads, const ReadOp& row) {
  if (!reads.empty()) {
    ReadOp& last = reads.back();
    if (last.target == row.target && last.offset + last.bytes == row.offset &&
        last.dest + last.bytes == row.dest) {
      last.bytes += row.bytes;
      return;
    }
  }
  reads.push_back(row);
}

/// Where verify read rows from when not from a rank of the store.
inline constexpr int origin_source = -1;

/// Reads rows of a field (ids, checked, all in one stretch of the placement) into dest, unverified:
/// how verify_rows gets a multi-row block. Returns where they came from: the rank, through the
/// store, or origin_source when that rank cannot be read (its process gone, no route to it).
using FetchRows =
    std::function<int(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest)>;

/// The rank a batch read sample id from: what a mismatch names.
using OwnerOf = std::function<int(uint64_t id)>;

/// Checks each row of dest (ids' rows back to back, read from their owners) against the index:
/// a row checksummed on its own directly; a row of a multi-row block by reading the whole block
/// once through fetch (its cost: a verified random read of a small row reads its block), hashing
/// it and comparing the row with the verified bytes. A ChecksumError names the sample asked, the
/// field, the block's samples and where its bytes came from: the rank when one rank gave them
/// all, else every rank (and origin) in the message.
inline void verify_rows(const Index& index, const Placement& placement, const OwnerOf& owner_of,
                        uint32_t field, std::span<const uint64_t> ids, const std::byte* dest,
                        const FetchRows& fetch) {
  const auto mismatch = [&](uint64_t id, const Block& b, std::span<const int> sources) {
    std::string rows;
    if (b.rows > 1) {
      rows = fmt::format(" (block of samples {}..{}", b.first_sample, b.first_sample + b.rows - 1);
      if (sources.size() > 1) {
        for (std::size_t i = 0; i < sources.size(); ++i) {
          rows += i == 0 ? ", read from " : i + 1 == sources.size() ? " and " : ", ";
          rows += sources[i] == origin_source ? std::string("origin")
                                              : fmt::format("rank {}", sources[i]);
        }
      }
      rows += ')';
    }
    std::optional<int> rank;
    if (sources.size() == 1 && sources[0] != origin_source) rank = sources[0];
    const char* what = sources.size() == 1 && sources[0] == origin_source
                           ? "bytes read from origin do not match the index checksum"
                           : "bytes read from the store do not match the index checksum";
    return ChecksumError(std::string(what) + rows + "; reload the dataset",
                         {.sample = id, .field = index.fields()[field].name, .rank = rank});
  };
  struct Pending {
    uint64_t block_first;
    uint64_t id;
    const std::byte* row;
  };
  std::vector<Pending> pending;
  for (uint64_t id : ids) {
    const Entry e = index.entry(id, field);
    const Block b = index.block(id, field);
    if (b.rows > 1) {
      pending.push_back({b.first_sample, id, dest});
    } else if (checksum({dest, e.length}) != b.checksum) {
      const int owner = owner_of(id);
      throw mismatch(id, b, {&owner, 1});
    }
    dest += e.length;
  }
  // By block, then id: a damaged block is reported at the lowest id asked of it.
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.block_first != b.block_first ? a.block_first < b.block_first : a.id < b.id;
  });
  std::vector<uint64_t> block_ids;
  std::vector<std::byte> bytes;
  std::vector<int> sources;
  for (std::size_t begin = 0, end = 0; begin < pending.size(); begin = end) {
    const Block block = index.block(pending[begin].id, field);
    const uint64_t length = index.entry(block.first_sample, field).length;  // one run
    for (end = begin; end < pending.size() && pending[end].block_first == block.first_sample;)
      ++end;
    // Each stretch the block spans gives its rows through the store (fetch's choice): origin may
    // have changed or gone since the load, so only a rank that cannot be read sends there.
    bytes.resize(block.rows * length);
    sources.clear();
    const uint64_t last = block.first_sample + block.rows;
    for (uint64_t s = block.first_sample; s < last;) {
      const uint64_t stop = std::min(last, placement.stretch(placement.stretch_of(s)).last);
      block_ids.resize(stop - s);
      std::iota(block_ids.begin(), block_ids.end(), s);
      const int source = fetch(
          field, block_ids,
          std::span(bytes).subspan((s - block.first_sample) * length, block_ids.size() * length));
      if (std::find(sources.begin(), sources.end(), source) == sources.end())
        sources.push_back(source);
      s = stop;
    }
    if (checksum(bytes) != block.checksum) throw mismatch(pending[begin].id, block, sources);
    for (std::size_t i = begin; i < end; ++i) {
      const uint64_t at = (pending[i].id - block.first_sample) * length;
      if (length && std::memcmp(pending[i].row, bytes.data() + at, length) != 0) {
        // The block checked out: the row the batch read from its owner is the one that differs.
        const int owner = owner_of(pending[i].id);
        throw mismatch(pending[i].id, block, {&owner, 1});
      }
    }
  }
}

}  // namespace ddstage::detail
