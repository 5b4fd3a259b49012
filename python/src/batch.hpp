// The Python Reader (served Client readers and embedded Store readers are one Reader): ids from
// any int sequence, batches read straight into numpy arrays with the GIL released.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "ddstage/client.hpp"
#include "ddstage/index.hpp"

namespace ddstage::python {

namespace py = pybind11;

/// numpy dtype of a field's elements (`bytes` is uint8).
py::dtype numpy_dtype(DType t);

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

/// Fixed rows: an array (len(ids), *shape). Variable rows: (data, offsets), data of shape
/// (total, *shape) and int64 offsets (len(ids) + 1) counted along data's first axis.
/// read(ids, dest) does the reading, without the GIL; r sizes the batch.
template <class Read>
py::object get_batch(PyReader& r, const std::string& field, const py::handle& ids_obj,
                     const py::object& out, Read&& read) {
  auto lock = r.claim();  // first: a closed store's index is gone
  auto ids = as_ids(ids_obj);
  const auto span = id_span(ids);
  const FieldInfo& info = field_info(*r.index, field);
  const uint64_t bytes = r.reader.batch_bytes(field, span);
  uint64_t rows = span.size();
  py::object offsets = py::none();
  if (info.variable) {
    std::vector<uint64_t> sizes(span.size());
    r.reader.row_sizes(field, span, sizes);
    auto starts = offsets_of(sizes, unit_bytes(info), field);
    rows = static_cast<uint64_t>(starts.at(span.size()));
    offsets = std::move(starts);
  }
  py::array dest = destination(out, bytes, info, rows);
  {
    py::gil_scoped_release released;
    read(span, std::span<std::byte>(static_cast<std::byte*>(dest.mutable_data()), bytes));
  }
  if (!info.variable) return dest;
  return py::make_tuple(dest, offsets);
}

}  // namespace ddstage::python
