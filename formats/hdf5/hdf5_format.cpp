// The HDF5 source format: detection, choosing rows or groups mode, and the manifest attributes.
#include <fmt/format.h>

#include <charconv>

#include "builtin_formats.hpp"
#include "ddstage/error.hpp"
#include "hdf5_dataset.hpp"
#include "hdf5_modes.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats {
namespace detail {
namespace {

constexpr std::size_t max_listed = 20;

struct RootListing {
  std::vector<std::string> names;
};

herr_t collect_root_link(hid_t, const char* name, const H5L_info_t*, void* data) noexcept {
  try {
    static_cast<RootListing*>(data)->names.emplace_back(name);
    return 0;
  } catch (...) {
    return -1;
  }
}

/// "/features [1000,28,28] float32" for a dataset, "/samples/" for a group.
std::string describe_object(hid_t root, const std::string& name) {
  H5Handle object(H5Oopen(root, name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!object) return "/" + name + " (unreadable)";
  if (H5Iget_type(object.get()) == H5I_GROUP) return "/" + name + "/";
  if (H5Iget_type(object.get()) != H5I_DATASET) return "/" + name;
  H5Handle space(H5Dget_space(object.get()), H5Sclose);
  H5Handle type(H5Dget_type(object.get()), H5Tclose);
  std::vector<hsize_t> dims(
      static_cast<std::size_t>(std::max(H5Sget_simple_extent_ndims(space.get()), 0)));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return fmt::format("/{} {} {}", name, shape_text({dims.begin(), dims.end()}),
                     describe_type(type.get()));
}

/// Nothing says what to index: show what the file holds so the user can pick.
[[noreturn]] void throw_no_mode(const std::string& path) {
  auto file = open_file(path);
  auto root = h5_own(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose, "H5Gopen2 /", path);
  RootListing listing;
  h5_check(H5Literate(root.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_root_link, &listing),
           "H5Literate /", path);
  std::string contents;
  for (std::size_t i = 0; i < listing.names.size() && i < max_listed; ++i) {
    contents += (i == 0 ? "" : ", ") + describe_object(root.get(), listing.names[i]);
  }
  if (listing.names.size() > max_listed)
    contents += fmt::format(", ... ({} in all)", listing.names.size());
  throw UsageError(
      fmt::format("say what to index in {}: --field NAME=PATH (rows of a dataset), --ragged "
                  "NAME=DATA:OFFSETS or --groups PATTERN; it holds: {}",
                  path, contents.empty() ? "nothing" : contents));
}

bool detect_hdf5(const FlattenRequest& request) {
  return !request.sources.empty() && looks_like_hdf5(request.sources.front());
}

void flatten_hdf5(const FlattenRequest& request, IndexWriter& writer) {
  silence_hdf5_errors();
  if (request.sources.empty()) throw UsageError("no source given");
  if (!request.groups.empty()) {
    if (!request.fields.empty() || !request.ragged.empty()) {
      throw UsageError(
          "--groups cannot be combined with --field or --ragged (one sample per group, or rows)");
    }
    return flatten_groups(request, writer);
  }
  if (request.fields.empty() && request.ragged.empty()) throw_no_mode(request.sources.front());
  flatten_rows(request, writer);
}

}  // namespace

std::string join_numbers(const std::vector<uint64_t>& numbers) {
  std::string out;
  for (auto n : numbers) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

std::vector<uint32_t> record_sources(IndexWriter& writer, std::string_view mode,
                                     const std::vector<uint64_t>& starts,
                                     const std::vector<std::string>& files) {
  writer.set_attribute(std::string(attr_mode), std::string(mode));
  writer.set_attribute(std::string(attr_source_starts), join_numbers(starts));
  std::vector<uint32_t> file_ids;
  for (const auto& f : files) file_ids.push_back(writer.add_source(f));
  writer.set_attribute(std::string(attr_source_files),
                       join_numbers(std::vector<uint64_t>(file_ids.begin(), file_ids.end())));
  return file_ids;
}

std::vector<uint64_t> parse_numbers(const std::string& text, std::string_view key) {
  std::vector<uint64_t> numbers;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    uint64_t v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || (next != end && *next != ',')) {
      throw IndexError(fmt::format("malformed manifest attribute {}: '{}'", key, text));
    }
    numbers.push_back(v);
    p = next == end ? end : next + 1;
  }
  return numbers;
}

}  // namespace detail

Format hdf5_format() {
  return {
      .name = "hdf5",
      .help = "HDF5 files: rows of datasets (--field, --ragged) or one sample per group (--groups)",
      .detect = &detail::detect_hdf5,
      .flatten = &detail::flatten_hdf5};
}

}  // namespace ddstage::formats
