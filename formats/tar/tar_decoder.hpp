// Compressed tar archives (.tar.gz, .tar.bz2, .tar.xz, .tar.zst): decoded once, with
// libarchive, into a temporary file that the tar reader then lists like any plain archive.
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::formats {

/// The compression `head` (a file's first bytes) starts with ("gzip", "bzip2", "xz", "zstd"),
/// or an empty string for none of these.
std::string compression_of(std::span<const std::byte> head);

/// Decodes the compressed file `path` into an unnamed temporary file in `scratch_dir` (gone when
/// the descriptor closes) and returns it, positioned anywhere. UsageError naming `path` for a
/// stream libarchive cannot decode (corrupt, truncated), or when this build has no libarchive.
FileDescriptor decode_to_scratch(const std::filesystem::path& path,
                                 const std::filesystem::path& scratch_dir);

}  // namespace ddstage::formats
