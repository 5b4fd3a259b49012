// Fixed-size-row datasets made on the fly for `bench store --synthetic`: a raw file and an
// index that points into it in place.
#pragma once

#include <cstdint>
#include <filesystem>

namespace ddstage::cli {

/// Rows of a synthetic dataset when the user gives no count: 128 MiB worth (more than any
/// CPU cache, so reads come from memory), at least one.
uint64_t default_synthetic_rows(uint64_t row_bytes);

/// Writes DIR/rows-ROW_BYTES.bin (rows x row_bytes pseudo-random bytes from seed) and indexes
/// it as DIR/rows-ROW_BYTES.ddx: one field "x" of row_bytes uint8 per sample. Returns the index.
std::filesystem::path write_synthetic_dataset(const std::filesystem::path& dir, uint64_t row_bytes,
                                              uint64_t rows, uint64_t seed);

}  // namespace ddstage::cli
