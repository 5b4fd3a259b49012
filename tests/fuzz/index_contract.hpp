// What a successfully opened Index promises its readers (libcore's loaders, `info --verify`,
// `read`, the Python binding), checked after every open that a fuzz target gets through.
#pragma once

#include <string>

#include "ddstage/index.hpp"
#include "fuzz_support.hpp"

namespace ddstage::fuzz {

/// Fixed fields' row sizes agree with their shape and dtype; every entry names a file of the
/// table and lies inside that file's recorded size; a fixed field's entries are one row long;
/// its block holds it and lies inside the samples.
inline void check_index_contract(const Index& index) {
  const auto fields = index.fields();
  const auto files = index.files();
  for (const auto& f : fields) {
    if (f.variable) continue;
    uint64_t row = dtype_size(f.dtype);
    for (uint64_t d : f.shape) {
      if (__builtin_mul_overflow(row, d, &row)) violated("field '" + f.name + "': shape overflows");
    }
    if (row != f.row_bytes) {
      violated("field '" + f.name + "': row_bytes " + std::to_string(f.row_bytes) +
               " but shape and dtype make " + std::to_string(row));
    }
  }
  // Format 3 runs make a few bytes stand for 2^64 rows: check the first and last ones.
  const uint64_t n = index.samples();
  const uint64_t edge = 2048;
  for (uint64_t s = 0; s < n; s = (s + 1 == edge && n > 2 * edge) ? n - edge : s + 1) {
    for (uint32_t k = 0; k < fields.size(); ++k) {
      const Entry e = index.entry(s, k);
      const std::string where = "entry (" + std::to_string(s) + ", " + std::to_string(k) + ")";
      if (e.file >= files.size()) violated(where + " names file " + std::to_string(e.file));
      uint64_t end = 0;
      if (__builtin_add_overflow(e.offset, e.length, &end) || end > files[e.file].size) {
        violated(where + " lies past the end of its file");
      }
      if (!fields[k].variable && e.length != fields[k].row_bytes)
        violated(where + " is not one row long");
      const Block b = index.block(s, k);
      if (b.rows == 0 || b.first_sample > s || s - b.first_sample >= b.rows ||
          b.rows > n - b.first_sample) {
        violated(where + " lies in a block that does not hold it");
      }
      // Verify paths size one buffer by a block.
      if (b.rows > detail::max_block_rows ||
          (b.rows > 1 && e.length > detail::max_block_bytes / b.rows)) {
        violated(where + " lies in a block of " + std::to_string(b.rows) + " rows of " +
                 std::to_string(e.length) + " bytes");
      }
    }
  }
}

}  // namespace ddstage::fuzz
