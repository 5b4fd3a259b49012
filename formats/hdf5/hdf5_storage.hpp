// What a dataset's stored bytes depend on beyond its own file: filter plugins and external raw
// data files. Both are checked before flattening starts, so a missing one is named up front.
#pragma once

#include <cstdint>
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

/// One piece of a dataset's data in an external raw file: `size` bytes (H5F_UNLIMITED: to the
/// end) at `offset` of `file` (absolute).
struct ExternalSlot {
  std::string file;
  uint64_t offset;
  uint64_t size;
};

/// The external raw data (H5Pset_external) of dataset `dset`, in order, with the files
/// resolved as HDF5 resolves them; `holder` is the HDF5 file the dataset lives in. UsageError
/// naming a file that cannot be read and where it was looked for.
std::vector<ExternalSlot> external_raw_data(hid_t dset, hid_t dcpl, const std::string& path,
                                            const std::string& holder, const std::string& file);

}  // namespace ddstage::formats::detail
