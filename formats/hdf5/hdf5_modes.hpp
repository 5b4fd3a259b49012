// The two ways an HDF5 source is flattened, and the manifest attributes they record.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/formats/format.hpp"
#include "hdf5_handle.hpp"

namespace ddstage::formats::detail {

/// Manifest attribute: "rows" (--field/--ragged) or "groups" (--groups).
inline constexpr std::string_view attr_mode = "mode";
/// Manifest attribute: the --groups pattern.
inline constexpr std::string_view attr_groups = "groups";
/// Manifest attribute: first sample id of each source, comma-separated ("0,1000,2500"), in the
/// order the sources were given.
inline constexpr std::string_view attr_source_starts = "source_starts";
/// Manifest attribute: file-table row of each source, in the same order ("0,1"); a file given
/// twice has one row.
inline constexpr std::string_view attr_source_files = "source_files";

/// "0,1000,2500".
std::string join_numbers(const std::vector<uint64_t>& numbers);
/// Parses join_numbers' output; IndexError naming the attribute `key` when malformed.
std::vector<uint64_t> parse_numbers(const std::string& text, std::string_view key);

/// Records the source files (add_source) and the mode, source_starts and source_files
/// attributes; starts[k] is the first sample of files[k]. Returns each file's file id.
std::vector<uint32_t> record_sources(IndexWriter& writer, std::string_view mode,
                                     const std::vector<uint64_t>& starts,
                                     const std::vector<std::string>& files);

/// Rows mode: sample i is row i of every --field dataset and rows OFFSETS[i]..OFFSETS[i+1]
/// of every --ragged one.
void flatten_rows(const FlattenRequest& request, IndexWriter& writer);

/// Groups mode: every group matching request.groups is a sample, its datasets the fields.
void flatten_groups(const FlattenRequest& request, IndexWriter& writer);

using GroupVisitor = std::function<void(const std::string& path, hid_t group)>;

/// Calls visit for every group whose path matches `pattern` (a glob per path component, as
/// fnmatch), in name order at every level. UsageError for an empty pattern.
void for_each_matching_group(hid_t file, const std::string& pattern, const std::string& file_name,
                             const GroupVisitor& visit);

/// The paths for_each_matching_group visits, in the same order.
std::vector<std::string> matching_groups(hid_t file, const std::string& pattern,
                                         const std::string& file_name);

}  // namespace ddstage::formats::detail
