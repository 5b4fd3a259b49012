// out= in device memory: arrays that describe themselves through __cuda_array_interface__
// (torch CUDA tensors, CuPy, Numba), read through libcore's device path.
#pragma once

#include <cstdint>
#include <optional>

#include <pybind11/pybind11.h>

#include "ddstage/device_buffer.hpp"
#include "ddstage/index.hpp"

namespace ddstage::python {

namespace py = pybind11;

/// out's memory when out has a __cuda_array_interface__ (versions 0 to 3), nullopt when it has
/// none. Checked as a numpy out= is, with the same UsageErrors and before any device call, so
/// that a bad interface is refused on a node without a GPU too: C-contiguous (strides None or
/// those of C order), writable, not masked, a dtype numpy knows, exactly `bytes` long. The
/// device number is left for locate(); the stream is the interface's (v3), else the default.
std::optional<DeviceBuffer> device_out(const py::object& out, uint64_t bytes,
                                       const FieldInfo& field);

/// dest with its device number, from the pointer: Error "out is a CUDA array
/// (__cuda_array_interface__), but no GPU: <reason>" without a runtime or device, UsageError
/// when the pointer is no device's memory. Needs no GIL.
DeviceBuffer locate(DeviceBuffer dest);

}  // namespace ddstage::python
