#include "hdf5_links.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace ddstage::formats::detail {
namespace {

namespace fs = std::filesystem;

std::string shown_path(const std::string& loc_path, const std::string& path) {
  return path.starts_with('/') ? path : loc_path + "/" + path;
}

void add_candidate(std::vector<std::string>& out, const fs::path& p) {
  auto s = fs::absolute(p).lexically_normal().string();
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
}

/// Where HDF5 (1.10 and later, H5F_prefix_open_file) looks for an external link's file: the
/// name itself when absolute, then (with only its last component when it was absolute) under
/// each HDF5_EXT_PREFIX directory, the directory of the file holding the link, and the current
/// directory. The link access property's prefix is never set by ddstage.
std::vector<std::string> elink_candidates(const std::string& target, const std::string& parent) {
  std::vector<std::string> out;
  fs::path name(target);
  if (name.is_absolute()) {
    add_candidate(out, name);
    name = name.filename();
  }
  const fs::path parent_dir = fs::absolute(parent).parent_path();
  if (const char* env = std::getenv("HDF5_EXT_PREFIX"); env != nullptr) {
    std::string prefixes(env);
    for (std::size_t begin = 0; begin <= prefixes.size();) {
      auto end = std::min(prefixes.find(':', begin), prefixes.size());
      std::string dir = prefixes.substr(begin, end - begin);
      if (dir.starts_with("${ORIGIN}")) dir = parent_dir.string() + dir.substr(9);
      if (!dir.empty()) add_candidate(out, fs::path(dir) / name);
      begin = end + 1;
    }
  }
  add_candidate(out, parent_dir / name);
  add_candidate(out, name);
  return out;
}

std::string parent_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? std::string(path.starts_with('/') ? "/" : ".")
                                                  : path.substr(0, slash);
}

std::string describe_dangling(hid_t loc, const std::string& link, const std::string& shown,
                              const std::string& file) {
  H5L_info_t info{};
  if (H5Lget_info(loc, link.c_str(), &info, H5P_DEFAULT) < 0) {
    return fmt::format("{} in {} cannot be opened", shown, file);
  }
  std::string value(info.type == H5L_TYPE_HARD ? 0 : info.u.val_size, '\0');
  if (value.empty() || H5Lget_val(loc, link.c_str(), value.data(), value.size(), H5P_DEFAULT) < 0) {
    return fmt::format("{} in {} cannot be opened", shown, file);
  }
  if (info.type == H5L_TYPE_SOFT) {
    return fmt::format("{} in {} is a soft link to {}, which does not exist", shown, file,
                       value.c_str());
  }
  const char* target_file = nullptr;
  const char* target_object = nullptr;
  if (info.type != H5L_TYPE_EXTERNAL ||
      H5Lunpack_elink_val(value.data(), value.size(), nullptr, &target_file, &target_object) < 0) {
    return fmt::format("{} in {} is a user-defined link that cannot be followed", shown, file);
  }
  // The link may sit in a file reached through an earlier external link: HDF5 resolves its
  // target relative to that file, not to the one on the command line.
  H5Handle parent(H5Oopen(loc, parent_of(link).c_str(), H5P_DEFAULT), H5Oclose);
  const std::string holder = parent ? file_of(parent.get(), file) : file;
  const auto candidates = elink_candidates(target_file, holder);
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) {
      return fmt::format("{} in {} is an external link to {} in {} ({}), which has no such object",
                         shown, file, target_object, target_file, c);
    }
  }
  return fmt::format(
      "{} in {} is an external link to {} in {}, which cannot be opened: HDF5 looked for {} (set "
      "HDF5_EXT_PREFIX to the directory that holds it)",
      shown, file, target_object, target_file, fmt::join(candidates, ", "));
}

}  // namespace

std::string file_of(hid_t object, const std::string& file) {
  auto name =
      h5_string([object](char* buf, std::size_t size) { return H5Fget_name(object, buf, size); });
  return name && !name->empty() ? *name : file;
}

std::optional<std::string> broken_link(hid_t loc, const std::string& loc_path,
                                       const std::string& path, const std::string& file) {
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    auto prefix = path.substr(0, end);
    if (!prefix.empty() && prefix != "/") {
      if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
      if (H5Oexists_by_name(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
        return describe_dangling(loc, prefix, shown_path(loc_path, prefix), file);
      }
    }
    if (end == std::string::npos) return std::nullopt;
  }
}

}  // namespace ddstage::formats::detail
