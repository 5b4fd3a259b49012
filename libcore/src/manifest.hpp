// manifest.yaml: the human-readable half of an index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "ddstage/index.hpp"

namespace ddstage::detail {

/// Version of manifest.yaml's keys. Separate from index.bin's version: format 2 of index.bin
/// only added a header field, and manifests stay readable by older builds' YAML parsing.
inline constexpr uint32_t manifest_format_version = 1;

/// Everything manifest.yaml holds.
struct Manifest {
  uint32_t format_version = manifest_format_version;
  ManifestInfo info;
  uint64_t samples = 0;
  std::vector<FieldInfo> fields;
};

/// Writes manifest.yaml; lists at most `max_listed_files` of `files` (index.bin has them all).
void write_manifest(const std::filesystem::path& path, const Manifest& manifest,
                    const std::vector<FileInfo>& files);
/// Reads and validates manifest.yaml, each field against itself (row_bytes is exactly its
/// shape times its dtype's size, names unique); IndexError naming the file and the problem.
Manifest read_manifest(const std::filesystem::path& path);

/// IndexError naming path unless row_bytes is exactly the shape times the dtype's size (0 for
/// a variable field), the shape is addressable and the name is not empty.
void check_field(const FieldInfo& field, const std::filesystem::path& path);

/// xxh3-64 of a canonical encoding of the field table (name, dtype, shape, variable,
/// row_bytes; not `source`, which is provenance): what index.bin records from format 2 on.
uint64_t fields_checksum(std::span<const FieldInfo> fields);

/// The dtype's size times the shape's product: a whole row of a fixed field, one element of a
/// variable field's first axis. nullopt if it overflows 64 bits.
std::optional<uint64_t> shape_bytes(const FieldInfo& field);

/// Most dimensions a row shape may have (numpy's limit).
inline constexpr std::size_t max_shape_dims = 32;

inline constexpr std::size_t max_listed_files = 1000;

}  // namespace ddstage::detail
