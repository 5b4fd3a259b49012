// Source formats: each one enumerates samples and byte ranges and feeds an IndexWriter.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/tool/index_writer.hpp"

namespace ddstage::formats {

/// `--field NAME=PATH`.
struct FieldSpec {
  std::string name;
  std::string path;
};

/// `--ragged NAME=DATA_PATH:OFFSETS_PATH` (CSR: sample i is rows OFFSETS[i]..OFFSETS[i+1]).
struct RaggedSpec {
  std::string name;
  std::string data;
  std::string offsets;
};

/// Everything `ddstage flatten` was asked, independent of the format.
struct FlattenRequest {
  std::vector<std::string> sources;  ///< as given: files, directories, "@list.txt"
  std::string format = "auto";
  std::vector<FieldSpec> fields;
  std::string groups;
  std::vector<RaggedSpec> ragged;
  bool pack = false;  ///< copy every sample into pack files, even where it could stay in place
  /// tar: group members into samples by WebDataset key, one field per extension.
  bool webdataset = false;
  /// Where a format may put temporary files (tar: decoded compressed shards); empty for the
  /// system's temporary directory ($TMPDIR, else /tmp).
  std::filesystem::path scratch_dir;
  /// Memory a format may hold for decoding (whole chunks, read blocks): it streams in pieces
  /// no larger than this, never the whole dataset.
  uint64_t memory_budget = 64ull << 20;
};

/// One source format: how it is recognised and how it flattens.
struct Format {
  std::string_view name;
  std::string_view help;
  /// True if the sources look like this format (by magic bytes or extension).
  bool (*detect)(const FlattenRequest& request);
  /// Validates the request and the sources (UsageError naming the problem, before any entry is
  /// written), calls writer.define(), then puts every entry.
  void (*flatten)(const FlattenRequest& request, IndexWriter& writer);
};

/// Every format this build has (hdf5 only when built with HDF5).
std::span<const Format> format_registry();

/// Picks the format (request.format, or detection for "auto") and flattens. UsageError for an
/// unknown format name, or for sources no format recognises.
void flatten(const FlattenRequest& request, IndexWriter& writer);

}  // namespace ddstage::formats
