#include "bench/synthetic_dataset.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/index_writer.hpp"

namespace ddstage::cli {
namespace {

/// Rows go through memory in chunks of about this many bytes (whole rows).
uint64_t chunk_rows(uint64_t row_bytes) {
  return std::max<uint64_t>(1, (8ull << 20) / row_bytes);
}

void write_rows(const std::filesystem::path& raw, uint64_t rows, uint64_t row_bytes,
                uint64_t seed) {
  auto fd = FileDescriptor::open(raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::byte> chunk;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t first = 0; first < rows; first += chunk_rows(row_bytes)) {
    chunk.resize(std::min(chunk_rows(row_bytes), rows - first) * row_bytes);
    // xorshift64: distinct bytes per row (checksums differ), far cheaper than std::mt19937.
    for (std::size_t at = 0; at < chunk.size(); at += sizeof state) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::memcpy(chunk.data() + at, &state, std::min(sizeof state, chunk.size() - at));
    }
    fd.write_all(chunk);
  }
  fd.sync();
}

}  // namespace

uint64_t default_synthetic_rows(uint64_t row_bytes) {
  return std::max<uint64_t>(1, (128ull << 20) / row_bytes);
}

std::filesystem::path write_synthetic_dataset(const std::filesystem::path& dir, uint64_t row_bytes,
                                              uint64_t rows, uint64_t seed) {
  const auto raw = dir / fmt::format("rows-{}.bin", row_bytes);
  const auto ddx = dir / fmt::format("rows-{}.ddx", row_bytes);
  IndexWriter writer({.out = ddx, .name = fmt::format("rows-{}", row_bytes)});
  writer.define({FieldInfo{.name = "x",
                           .dtype = DType::uint8,
                           .shape = {row_bytes},
                           .row_bytes = row_bytes,
                           .source = "synthetic"}},
                rows);
  // The source is complete before it is added: the index records its final size and mtime.
  write_rows(raw, rows, row_bytes, seed);
  const uint32_t file = writer.add_source(raw);
  const auto in = FileDescriptor::open(raw, O_RDONLY);
  std::vector<std::byte> chunk;
  for (uint64_t first = 0; first < rows; first += chunk_rows(row_bytes)) {
    const uint64_t n = std::min(chunk_rows(row_bytes), rows - first);
    chunk.resize(n * row_bytes);
    in.pread_exact(chunk, first * row_bytes);
    for (uint64_t r = 0; r < n; ++r) {
      writer.put_in_place(first + r, 0, file, (first + r) * row_bytes,
                          std::span(chunk).subspan(r * row_bytes, row_bytes));
    }
  }
  writer.commit();
  return ddx;
}

}  // namespace ddstage::cli
