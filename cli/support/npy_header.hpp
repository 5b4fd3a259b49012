// `read -o FILE.npy`: the header that makes the samples' raw bytes a numpy array file.
#pragma once

#include <cstdint>
#include <string>

#include "ddstage/index.hpp"

namespace ddstage::cli {

/// True when path names a .npy file (read then writes a header before the rows).
bool is_npy_path(const std::string& path);

/// The .npy (format 1.0, 2.0 for long headers, 3.0 for non-ASCII member names) header for rows
/// rows of field: shape (rows, *field shape), little-endian descr numpy reads as the dtype the
/// Python binding gives (text as S<n>, records as structured dtypes with their offsets). A
/// variable-size field has no such shape: UsageError naming it.
std::string npy_header(const FieldInfo& field, uint64_t rows);

}  // namespace ddstage::cli
