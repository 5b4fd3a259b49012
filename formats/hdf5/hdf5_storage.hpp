// What a dataset's stored bytes depend on beyond its own file: filter plugins and external raw
// data files. Both are checked before flattening starts, so a missing one is named up front.
#pragma once

#include <string>
#include <vector>

#include "hdf5_handle.hpp"

namespace ddstage::formats::detail {

/// Lets HDF5 load the filter plugins of Debian's packages (once per process): see the .cpp.
void prepare_filter_plugins();

/// UsageError naming the first filter of dataset `dset` (creation properties `dcpl`) this
/// process cannot decode, with the package that provides it and where HDF5 looked for plugins.
/// An optional filter that no chunk went through needs no decoder.
void check_filters(hid_t dset, hid_t dcpl, const std::string& path, const std::string& file);

/// The external raw data files (H5Pset_external) of dataset `dset`, as HDF5 resolves them;
/// `holder` is the HDF5 file the dataset lives in. UsageError naming a file that cannot be
/// read and where it was looked for.
std::vector<std::string> external_raw_files(hid_t dset, hid_t dcpl, const std::string& path,
                                            const std::string& holder, const std::string& file);

}  // namespace ddstage::formats::detail
