// manifest.yaml: the human-readable half of an index.
#pragma once

#include <filesystem>
#include <vector>

#include "ddstage/index.hpp"

namespace ddstage::detail {

/// Everything manifest.yaml holds.
struct Manifest {
  uint32_t format_version = index_format_version;
  ManifestInfo info;
  uint64_t samples = 0;
  std::vector<FieldInfo> fields;
};

/// Writes manifest.yaml; lists at most `max_listed_files` of `files` (index.bin has them all).
void write_manifest(const std::filesystem::path& path, const Manifest& manifest,
                    const std::vector<FileInfo>& files);
/// Reads and validates manifest.yaml; IndexError naming the problem.
Manifest read_manifest(const std::filesystem::path& path);

inline constexpr std::size_t max_listed_files = 1000;

}  // namespace ddstage::detail
