#include "device_out.hpp"

#include <vector>

#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "batch.hpp"
#include "ddstage/error.hpp"

namespace ddstage::python {
namespace {

[[noreturn]] void malformed(const char* key, const char* want) {
  throw UsageError(fmt::format("out's __cuda_array_interface__ has no valid '{}' ({})", key, want));
}

template <class T>
T entry(const py::dict& iface, const char* key, const char* want) {
  if (!iface.contains(key)) malformed(key, want);
  try {
    return iface[key].cast<T>();
  } catch (const py::cast_error&) {
    malformed(key, want);
  }
}

bool present(const py::dict& iface, const char* key) {
  return iface.contains(key) && !iface[key].is_none();
}

/// Whether strides are C order's, ignoring axes of length 1 (any stride walks them the same);
/// an empty array is contiguous whatever they are.
bool c_contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  int64_t itemsize) {
  if (strides.size() != shape.size()) return false;
  for (int64_t n : shape) {
    if (n == 0) return true;
  }
  int64_t expected = itemsize;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

int64_t itemsize_of(const py::dict& iface) {
  const auto typestr = entry<std::string>(iface, "typestr", "a numpy type string such as '<f4'");
  try {
    return py::dtype(typestr).itemsize();
  } catch (const py::error_already_set&) {
    malformed("typestr", "a numpy type string such as '<f4'");
  }
}

/// The interface's (v3) stream as the cudaStream_t / hipStream_t libcore queues on. Its
/// values 1 (legacy default stream) and none are the null stream; 2 (per-thread default
/// stream) is the runtimes' own handle for it, as any other value is a stream's.
void* stream_of(const py::dict& iface, int64_t version) {
  if (version < 3 || !present(iface, "stream")) return nullptr;
  const auto stream = entry<uint64_t>(iface, "stream", "None or a nonzero stream handle");
  if (stream == 0) malformed("stream", "None or a nonzero stream handle");
  return stream == 1 ? nullptr : reinterpret_cast<void*>(static_cast<uintptr_t>(stream));
}

}  // namespace

std::optional<DeviceBuffer> device_out(const py::object& out, uint64_t bytes,
                                       const FieldInfo& field) {
  PyObject* raw = PyObject_GetAttrString(out.ptr(), "__cuda_array_interface__");
  if (raw == nullptr) {
    // The protocol's "not device memory here" (torch: a CPU tensor) is an AttributeError.
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return std::nullopt;
    }
    py::error_already_set failed;  // fetched: what() would add the traceback to the one line
    // torch's KeyError is its table of typestrs lacking the tensor's dtype.
    const bool no_typestr = failed.matches(PyExc_KeyError);
    throw UsageError(fmt::format("out's __cuda_array_interface__ failed: {}: {}{}",
                                 py::str(failed.type().attr("__name__")).cast<std::string>(),
                                 py::str(failed.value()).cast<std::string>(),
                                 no_typestr
                                     ? " (torch has none for bool and bfloat16 tensors: read into "
                                       "out.view(torch.uint8))"
                                     : ""));
  }
  const auto object = py::reinterpret_steal<py::object>(raw);
  if (!py::isinstance<py::dict>(object)) {
    throw UsageError("out's __cuda_array_interface__ is not a dict");
  }
  const auto iface = py::reinterpret_borrow<py::dict>(object);
  const auto version = entry<int64_t>(iface, "version", "an integer");
  if (version < 0 || version > 3) {
    throw UsageError(fmt::format(
        "out's __cuda_array_interface__ is version {}; ddstage reads versions 0 to 3", version));
  }
  const auto shape = entry<std::vector<int64_t>>(iface, "shape", "a tuple of lengths");
  int64_t elements = 1;
  for (int64_t n : shape) {
    if (n < 0) malformed("shape", "a tuple of lengths");
    elements *= n;
  }
  const int64_t itemsize = itemsize_of(iface);
  const auto [ptr, readonly] =
      entry<std::pair<uint64_t, bool>>(iface, "data", "a tuple (pointer, read-only flag)");
  if (present(iface, "strides") &&
      !c_contiguous(shape,
                    entry<std::vector<int64_t>>(iface, "strides", "None or a tuple of strides"),
                    itemsize)) {
    throw UsageError("out must be C-contiguous");
  }
  if (readonly) throw UsageError("out must be writable");
  if (present(iface, "mask")) throw UsageError("out must not be masked");
  check_out_bytes(static_cast<uint64_t>(elements * itemsize), bytes, field);
  return DeviceBuffer{.ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)),
                      .bytes = bytes,
                      .device = 0,
                      .stream = stream_of(iface, version)};
}

DeviceBuffer locate(DeviceBuffer dest) {
  try {
    dest.device = device_of(dest.ptr);
  } catch (const Error& e) {
    throw Error(e.kind(),
                fmt::format("out is device memory (__cuda_array_interface__), but {}", e.message()),
                e.context());
  }
  return dest;
}

}  // namespace ddstage::python
