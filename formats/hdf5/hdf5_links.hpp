// Which file an HDF5 object really lives in, and why a link path leads nowhere.
#pragma once

#include <optional>
#include <string>

#include "hdf5_handle.hpp"

namespace ddstage::formats::detail {

/// The name of the file `object` lives in: the file named on the command line unless an
/// external link on the way to the object led into another one. `file` names the former in
/// errors.
std::string file_of(hid_t object, const std::string& file);

/// Why `path` (relative to `loc`, whose own path is `loc_path`: "" for a file's root) names no
/// object although a link exists at each step: a dangling soft link, an external link to a file
/// HDF5 cannot open (with every place HDF5 looked for it), or one to a missing object. nullopt
/// when the path is simply absent or resolves.
std::optional<std::string> broken_link(hid_t loc, const std::string& loc_path,
                                       const std::string& path, const std::string& file);

}  // namespace ddstage::formats::detail
