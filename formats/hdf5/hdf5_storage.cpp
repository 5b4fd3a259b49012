#include "hdf5_storage.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string_view>

#include "ddstage/error.hpp"

namespace ddstage::formats::detail {
namespace {

namespace fs = std::filesystem;

struct KnownFilter {
  H5Z_filter_t id;
  std::string_view name;
  std::string_view package;  // Debian package with its plugin; empty when none is packaged
};

// Registered ids:
// https://github.com/HDFGroup/hdf5_plugins/blob/master/docs/RegisteredFilterPlugins.md
constexpr std::array<KnownFilter, 15> known_filters{{
    {H5Z_FILTER_DEFLATE, "deflate", ""},
    {H5Z_FILTER_SHUFFLE, "shuffle", ""},
    {H5Z_FILTER_FLETCHER32, "fletcher32", ""},
    {H5Z_FILTER_SZIP, "szip", ""},
    {H5Z_FILTER_NBIT, "n-bit", ""},
    {H5Z_FILTER_SCALEOFFSET, "scale-offset", ""},
    {307, "BZip2", "hdf5-filter-plugin"},
    {32000, "LZF", "hdf5-plugin-lzf and liblzf1"},
    {32001, "Blosc", "hdf5-filter-plugin-blosc-serial"},
    {32004, "LZ4", "hdf5-filter-plugin"},
    {32008, "Bitshuffle", ""},
    {32013, "ZFP", "hdf5-filter-plugin-zfp-serial"},
    {32015, "Zstandard", ""},
    {32017, "SZ", ""},
    {32026, "Blosc2", ""},
}};

const KnownFilter* known_filter(H5Z_filter_t id) {
  for (const auto& f : known_filters) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

std::vector<std::string> plugin_directories() {
  std::vector<std::string> dirs;
  unsigned count = 0;
  if (H5PLsize(&count) < 0) return dirs;
  for (unsigned i = 0; i < count; ++i) {
    auto dir = h5_string([i](char* buf, std::size_t size) { return H5PLget(i, buf, size); });
    if (dir && !dir->empty()) dirs.push_back(std::move(*dir));
  }
  return dirs;
}

[[noreturn]] void throw_missing_filter(H5Z_filter_t id, const char* stored_name,
                                       const std::string& path, const std::string& file,
                                       const std::string& hdf5_reason) {
  const auto* known = known_filter(id);
  const std::string name = known ? std::string(known->name) : stored_name;
  const std::string what = name.empty() ? "" : " (" + name + ")";
  std::string remedy;
  if (known != nullptr && id < H5Z_FILTER_RESERVED) {
    remedy = "this HDF5 library was built without it";
  } else if (known != nullptr && !known->package.empty()) {
    remedy = fmt::format("install {} or set HDF5_PLUGIN_PATH", known->package);
  } else {
    remedy = "set HDF5_PLUGIN_PATH to a directory holding its plugin";
  }
  const auto dirs = plugin_directories();
  throw UsageError(fmt::format(
      "dataset {} in {} needs HDF5 filter {}{}, which is not available: {} (plugins are looked "
      "for in {}{})",
      path, file, id, what, remedy,
      dirs.empty() ? "no directory" : fmt::format("{}", fmt::join(dirs, ":")),
      hdf5_reason.empty() ? "" : "; HDF5 says: " + hdf5_reason));
}

/// HDF5_EXTFILE_PREFIX, else the prefix of the dataset's access property list, with ${ORIGIN}
/// standing for the directory of the file the dataset lives in (H5D__build_file_prefix).
std::string external_prefix(hid_t dset, const std::string& holder, const std::string& file) {
  std::string prefix;
  if (const char* env = std::getenv("HDF5_EXTFILE_PREFIX"); env != nullptr) prefix = env;
  if (prefix.empty()) {
    auto dapl = h5_own(H5Dget_access_plist(dset), H5Pclose, "H5Dget_access_plist", file);
    auto stored = h5_string([&dapl](char* buf, std::size_t size) {
      return H5Pget_efile_prefix(dapl.get(), buf, size);
    });
    if (!stored) throw_hdf5_error("H5Pget_efile_prefix", file);
    prefix = *stored;
  }
  if (prefix == ".") return "";
  constexpr std::string_view origin = "${ORIGIN}";
  if (prefix.starts_with(origin)) {
    prefix = fs::absolute(holder).parent_path().string() + prefix.substr(origin.size());
  }
  return prefix;
}

/// Whether every allocated chunk skipped filter `index` of the pipeline: HDF5 writes chunks
/// without an optional filter it cannot apply, and reads them back without it.
bool every_chunk_skips(hid_t dset, unsigned index, const std::string& path,
                       const std::string& file) {
  // HDF5 1.10 takes no H5S_ALL here: the whole file space it is.
  auto space = h5_own(H5Dget_space(dset), H5Sclose, "H5Dget_space " + path, file);
  hsize_t chunks = 0;
  h5_check(H5Dget_num_chunks(dset, space.get(), &chunks), "H5Dget_num_chunks " + path, file);
  for (hsize_t c = 0; c < chunks; ++c) {
    unsigned mask = 0;
    h5_check(H5Dget_chunk_info(dset, space.get(), c, nullptr, &mask, nullptr, nullptr),
             "H5Dget_chunk_info " + path, file);
    if ((mask & (1u << index)) == 0) return false;
  }
  return true;
}

}  // namespace

void prepare_filter_plugins() {
  // Debian 12's hdf5-plugin-lzf ships liblzf_filter.so without a DT_NEEDED entry for liblzf, so
  // dlopen fails with "undefined symbol: lzf_decompress" unless liblzf is already loaded with
  // global symbols (h5py never notices: it registers its own LZF filter). The library stays
  // loaded for the life of the process, as the plugin that needs it does.
  static std::once_flag once;
  std::call_once(once, [] { (void)dlopen("liblzf.so.1", RTLD_NOW | RTLD_GLOBAL); });
}

void check_filters(hid_t dset, hid_t dcpl, const std::string& path, const std::string& file) {
  const int count = h5_check(H5Pget_nfilters(dcpl), "H5Pget_nfilters " + path, file);
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0;
    std::size_t values = 0;
    std::array<char, 256> name{};
    unsigned config = 0;
    H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &values, nullptr,
                                     name.size(), name.data(), &config);
    h5_check(id, "H5Pget_filter2 " + path, file);
    H5Eclear2(H5E_DEFAULT);
    // H5Zfilter_avail loads the plugin when the filter is not registered yet.
    if (H5Zfilter_avail(id) <= 0) {
      std::string reason = innermost_hdf5_error();
      if ((flags & H5Z_FLAG_OPTIONAL) != 0 &&
          every_chunk_skips(dset, static_cast<unsigned>(i), path, file)) {
        continue;
      }
      if (reason.find("dlopen") == std::string::npos) reason.clear();
      throw_missing_filter(id, name.data(), path, file, reason);
    }
  }
}

std::vector<ExternalSlot> external_raw_data(hid_t dset, hid_t dcpl, const std::string& path,
                                            const std::string& holder, const std::string& file) {
  const int count = h5_check(H5Pget_external_count(dcpl), "H5Pget_external_count " + path, file);
  if (count == 0) return {};
  const std::string prefix = external_prefix(dset, holder, file);
  std::vector<ExternalSlot> slots;
  for (int i = 0; i < count; ++i) {
    std::array<char, 4097> name{};
    off_t offset = 0;
    hsize_t size = 0;
    h5_check(H5Pget_external(dcpl, static_cast<unsigned>(i), name.size() - 1, name.data(), &offset,
                             &size),
             "H5Pget_external " + path, file);
    fs::path raw(name.data());
    if (!prefix.empty() && raw.is_relative()) raw = fs::path(prefix) / raw;
    const std::string shown = fs::absolute(raw).lexically_normal().string();
    if (::access(raw.c_str(), R_OK) != 0) {
      const int err = errno;
      throw UsageError(fmt::format(
          "dataset {} in {} keeps its data in external raw file {}, which cannot be read: {} "
          "(looked for {}{})",
          path, file, name.data(), std::strerror(err), shown,
          prefix.empty() ? ", from the current directory: set HDF5_EXTFILE_PREFIX to the "
                           "directory that holds it, or to ${ORIGIN} for the HDF5 file's own"
                         : ""));
    }
    slots.push_back({shown, static_cast<uint64_t>(offset), size});
  }
  return slots;
}

}  // namespace ddstage::formats::detail
