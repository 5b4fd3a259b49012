// HDF5 datatypes as ddstage DTypes, and the in-memory type samples are decoded to.
#pragma once

#include <string>

#include "ddstage/dtype.hpp"
#include "hdf5_handle.hpp"

namespace ddstage::formats::detail {

/// The DType of a dataset's file type: integers of 1/2/4/8 bytes, IEEE floats of 2/4/8 bytes
/// and h5py booleans (an int8 enum of FALSE and TRUE). Anything else is a UsageError
/// "dataset PATH in FILE has unsupported type X (supported: ...)".
DType dtype_of(hid_t type, const std::string& path, const std::string& file);

/// A short human name of an HDF5 type ("float32 big-endian", "string", "compound").
std::string describe_type(hid_t type);

/// Whether bytes on disk are already what memory_type() decodes to (little-endian or one byte).
bool stored_as_memory(hid_t type);

/// The type to read into: the file type in little-endian byte order, which is what the index
/// stores, so big-endian sources are converted by HDF5 while decoding.
H5Handle memory_type(hid_t file_type, const std::string& file);

}  // namespace ddstage::formats::detail
