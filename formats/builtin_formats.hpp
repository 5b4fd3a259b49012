// The formats compiled into this build; format_registry() lists them.
#pragma once

#include "ddstage/config.hpp"
#include "ddstage/formats/format.hpp"

namespace ddstage::formats {

Format files_format();
Format npy_format();
Format tar_format();
#if DDSTAGE_HAVE_HDF5
Format hdf5_format();
#endif

}  // namespace ddstage::formats
