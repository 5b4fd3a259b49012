#include <fmt/format.h>

#include "builtin_formats.hpp"
#include "ddstage/error.hpp"

namespace ddstage::formats {

std::span<const Format> format_registry() {
  static const std::vector<Format> formats = {
#if DDSTAGE_HAVE_HDF5
    hdf5_format(),
#endif
    npy_format(),
    tar_format(),
    files_format(),
  };
  return formats;
}

namespace {

void run(const Format& format, const FlattenRequest& request, IndexWriter& writer) {
  if (request.webdataset && format.name != "tar") {
    throw UsageError(
        fmt::format("--webdataset applies to tar shards, not to format '{}'", format.name));
  }
  writer.set_format(std::string(format.name));
  format.flatten(request, writer);
}

}  // namespace

void flatten(const FlattenRequest& request, IndexWriter& writer) {
  if (request.sources.empty()) throw UsageError("no source given");
  auto formats = format_registry();
  std::string names;
  for (const auto& f : formats) {
    names += names.empty() ? "" : ", ";
    names += f.name;
    if (request.format == f.name) return run(f, request, writer);
  }
  if (request.format != "auto") {
    throw UsageError(
        fmt::format("unknown --format '{}' (this build has: auto, {})", request.format, names));
  }
  // Detection order matters: files is the catch-all for directories and lists.
  for (const auto& f : formats) {
    if (f.detect(request)) return run(f, request, writer);
  }
  throw UsageError(fmt::format("cannot tell the format of '{}'; pass --format ({})",
                               request.sources.front(), names));
}

}  // namespace ddstage::formats
