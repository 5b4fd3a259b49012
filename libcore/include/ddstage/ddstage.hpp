// The front door: what an app needs to read staged datasets, in one include.
//   #include <ddstage/ddstage.hpp>   // Client, OriginDataset, Reader, Store, Settings, Index,
//                                    // errors, profile
//   #include <ddstage/mpi.hpp>       // only for make_store(MPI_Comm): it includes <mpi.h>
#pragma once

#include "ddstage/client.hpp"
#include "ddstage/config.hpp"
#include "ddstage/device_buffer.hpp"
#include "ddstage/dtype.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/origin_dataset.hpp"
#include "ddstage/profile.hpp"
#include "ddstage/settings.hpp"
#if DDSTAGE_HAVE_MPI
// The embedded Store exists only in a build with MPI (its header is not installed otherwise).
#include "ddstage/store.hpp"
#endif
