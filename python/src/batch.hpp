// The Python Reader (served Client readers and embedded Store readers are one Reader): ids from
// any int sequence, batches read straight into numpy arrays with the GIL released.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "ddstage/client.hpp"
#include "ddstage/device_buffer.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "device_out.hpp"

namespace ddstage::python {

namespace py = pybind11;

/// numpy dtype of a field's elements: `bytes` is uint8, text is "S<n>", a record is numpy's
/// structured dtype with the members' names, types and offsets.
py::dtype numpy_dtype(const FieldInfo& field);
/// numpy shape of one row (one element of the first axis when variable): the index's shape,
/// less its last axis where numpy_dtype() made that axis one element ("S<n>", a record).
std::vector<py::ssize_t> numpy_shape(const FieldInfo& field);

/// The field's description; UsageError listing the fields when there is none of that name.
const FieldInfo& field_info(const Index& index, const std::string& field);

/// Bytes of one element of a field's first axis: a whole row when fixed, one element of the
/// variable first dimension when variable.
uint64_t unit_bytes(const FieldInfo& info);

/// Sample ids as a 1-D int64 array, without a copy when ids already is one (a Loader's slice
/// of its permutation). UsageError for non-integers, more than one dimension or a negative id.
py::array_t<int64_t> as_ids(const py::handle& ids);

inline std::span<const uint64_t> id_span(const py::array_t<int64_t>& ids) {
  // as_ids rejected negative ids, so the bit patterns are the same values.
  return {reinterpret_cast<const uint64_t*>(ids.data()), static_cast<std::size_t>(ids.size())};
}

/// The destination of a batch: `out` when given (checked: C-contiguous, writable, exactly
/// `bytes` long), otherwise a new uninitialised array of the field's dtype, `rows` long on
/// its first axis.
py::array destination(const py::object& out, uint64_t bytes, const FieldInfo& field, uint64_t rows);

/// UsageError "out holds H bytes; this batch of field 'F' is B bytes" unless holds == bytes.
void check_out_bytes(uint64_t holds, uint64_t bytes, const FieldInfo& field);

/// Row starts of a variable batch counted in units, the total last. A row that is not a whole
/// number of units is an IndexError (the index and its manifest disagree).
py::array_t<int64_t> offsets_of(std::span<const uint64_t> sizes, uint64_t unit,
                                const std::string& field);

/// The one Reader binding, for served and embedded datasets alike: behind a lock that is only
/// ever tried (a Reader belongs to one thread, and two Python threads sharing one get a
/// UsageError instead of corrupting its scratch), with an optional check that what it reads
/// from is still open (an embedded Store closed before MPI_Finalize).
struct PyReader {
  PyReader(Reader r, const Index& i, std::function<void()> check_open = {})
      : reader(std::move(r)), index(&i), check_open(std::move(check_open)) {}

  /// The reader for one call: UsageError when another thread holds it or its store is closed.
  std::unique_lock<std::mutex> claim();

  Reader reader;
  const Index* index;  // owned by what the reader keeps alive
  std::function<void()> check_open;
  std::mutex busy;
};

/// Total bytes of field for ids (repeats counted).
uint64_t batch_bytes(PyReader& r, const std::string& field, const py::handle& ids);
/// Per-id byte sizes of field, as a uint64 array.
py::array_t<uint64_t> row_sizes(PyReader& r, const std::string& field, const py::handle& ids);

/// A batch as get_batch prepares it before reading: ids converted, destination sized.
struct PreparedBatch {
  py::array_t<int64_t> ids;
  py::object dest;                     // what the rows go into, returned to the caller
  std::span<std::byte> host;           // its memory, when that is host memory
  std::optional<DeviceBuffer> device;  // else its device memory, device number not yet known
  py::object offsets = py::none();
  uint64_t bytes = 0;
};

/// Converts ids and sizes the destination (fixed rows: an array (len(ids), *shape); variable
/// rows: data of shape (total, *shape) with int64 offsets (len(ids) + 1) along its first axis,
/// the offsets in host memory even when out is device memory). device_ok: whether out may be
/// device memory (device_out.hpp); a UsageError otherwise.
PreparedBatch prepare_batch(PyReader& r, const std::string& field, const py::handle& ids_obj,
                            const py::object& out, bool device_ok);

/// Fixed rows: an array (len(ids), *shape). Variable rows: (data, offsets). read(ids, dest)
/// does the reading, without the GIL, dest being a std::span<std::byte> or, when read takes
/// one, a DeviceBuffer (out= in device memory); r sizes the batch. When the ids or the
/// destination are bad, fail(exception) runs before the error reaches Python: a collective
/// read passes it to the other ranks there, so none of them waits for this one.
template <class Read, class Fail>
py::object get_batch(PyReader& r, const std::string& field, const py::handle& ids_obj,
                     const py::object& out, Read&& read, Fail&& fail) {
  constexpr bool reads_device =
      std::is_invocable_v<Read&, std::span<const uint64_t>, const DeviceBuffer&>;
  std::unique_lock<std::mutex> lock;
  PreparedBatch batch;
  try {
    lock = r.claim();  // first: a closed store's index is gone
    batch = prepare_batch(r, field, ids_obj, out, reads_device);
  } catch (const py::error_already_set& e) {
    // The other ranks learn it as a usage error; this rank keeps Python's own exception.
    try {
      fail(std::make_exception_ptr(UsageError(e.what())));
    } catch (const std::exception&) {
    }
    throw;
  } catch (...) {
    fail(std::current_exception());
    throw;
  }
  {
    py::gil_scoped_release released;
    if constexpr (reads_device) {
      // An empty batch into device memory has nothing to copy, and may have no pointer.
      if (batch.device && batch.bytes > 0) read(id_span(batch.ids), locate(*batch.device));
    }
    if (!batch.device) read(id_span(batch.ids), batch.host);
  }
  if (batch.offsets.is_none()) return batch.dest;
  return py::make_tuple(batch.dest, batch.offsets);
}

}  // namespace ddstage::python
