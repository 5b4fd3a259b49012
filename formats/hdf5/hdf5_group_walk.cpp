// Enumerating the groups a --groups pattern matches, component by component in name order.
#include <fmt/format.h>
#include <fnmatch.h>

#include "ddstage/error.hpp"
#include "hdf5_links.hpp"
#include "hdf5_modes.hpp"

namespace ddstage::formats::detail {
namespace {

struct Walk {
  std::vector<std::string> parts;
  const std::string& file;
  const GroupVisitor& visit;
};

struct LinkMatch {
  const std::string* glob;
  std::vector<std::string> names;
};

herr_t collect_matching_link(hid_t, const char* name, const H5L_info_t*, void* data) noexcept {
  auto* match = static_cast<LinkMatch*>(data);
  try {
    if (fnmatch(match->glob->c_str(), name, 0) == 0) match->names.emplace_back(name);
    return 0;
  } catch (...) {
    return -1;  // never let an exception cross HDF5's C frames
  }
}

bool has_glob(const std::string& part) {
  return part.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> matching_links(hid_t group, const std::string& part,
                                        const std::string& path, const std::string& file) {
  if (!has_glob(part)) {
    return H5Lexists(group, part.c_str(), H5P_DEFAULT) > 0 ? std::vector<std::string>{part}
                                                           : std::vector<std::string>{};
  }
  // H5_INDEX_NAME increasing is HDF5's own name order: that is the sample order.
  LinkMatch match{&part, {}};
  h5_check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_matching_link, &match),
           "H5Literate " + (path.empty() ? std::string("/") : path), file);
  return std::move(match.names);
}

void walk(hid_t group, const std::string& path, std::size_t depth, const Walk& w) {
  for (const auto& name : matching_links(group, w.parts[depth], path, w.file)) {
    // A matching name that leads nowhere (a dangling soft link, an external link to a missing
    // file) may be a sample whose data is elsewhere: refuse rather than leave it out.
    H5Handle object(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object) {
      if (auto why = broken_link(group, path, name, w.file)) throw UsageError(*why);
    }
    if (!object || H5Iget_type(object.get()) != H5I_GROUP) continue;
    const std::string child = path + "/" + name;
    if (depth + 1 == w.parts.size()) {
      w.visit(child, object.get());
    } else {
      walk(object.get(), child, depth + 1, w);
    }
  }
}

std::vector<std::string> split_pattern(const std::string& pattern) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= pattern.size()) {
    auto end = pattern.find('/', begin);
    if (end == std::string::npos) end = pattern.size();
    if (end > begin) parts.push_back(pattern.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

}  // namespace

void for_each_matching_group(hid_t file, const std::string& pattern, const std::string& file_name,
                             const GroupVisitor& visit) {
  Walk w{split_pattern(pattern), file_name, visit};
  if (w.parts.empty()) {
    throw UsageError(fmt::format("--groups '{}' names no groups (e.g. '/samples/*')", pattern));
  }
  auto root = h5_own(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "H5Gopen2 /", file_name);
  walk(root.get(), "", 0, w);
}

std::vector<std::string> matching_groups(hid_t file, const std::string& pattern,
                                         const std::string& file_name) {
  std::vector<std::string> paths;
  for_each_matching_group(file, pattern, file_name,
                          [&paths](const std::string& path, hid_t) { paths.push_back(path); });
  return paths;
}

}  // namespace ddstage::formats::detail
