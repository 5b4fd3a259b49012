#include "batch.hpp"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "ddstage/error.hpp"
#include "device_out.hpp"

namespace ddstage::python {

namespace {

py::dtype scalar_dtype(DType t) {
  switch (t) {
    case DType::bytes:
      return py::dtype("uint8");
    case DType::boolean:
      return py::dtype("bool");
    // Every other canonical name is numpy's own spelling.
    default:
      return py::dtype(std::string(dtype_name(t)));
  }
}

// The index keeps a string's length and a record's size as the last axis (every size stays
// dtype_size() times the shape); numpy makes that axis part of the element type. A variable
// text field has no such axis (each row is one string): its rows are bytes.
bool last_axis_is_element(const FieldInfo& f) {
  return f.dtype == DType::structured ||
         (f.dtype == DType::bytes && !f.encoding.empty() && !f.shape.empty());
}

py::dtype record_dtype(const FieldInfo& f) {
  py::list names, formats, offsets;
  for (const auto& m : f.members) {
    names.append(m.name);
    offsets.append(m.offset);
    std::vector<uint64_t> shape = m.shape;
    py::object base;
    if (m.dtype == DType::bytes && !shape.empty()) {
      base = py::dtype(fmt::format("S{}", shape.back()));
      shape.pop_back();
    } else {
      base = scalar_dtype(m.dtype);
    }
    formats.append(shape.empty() ? base : py::make_tuple(base, py::tuple(py::cast(shape))));
  }
  py::dict spec;
  spec["names"] = names;
  spec["formats"] = formats;
  spec["offsets"] = offsets;
  spec["itemsize"] = f.shape.back();
  return py::dtype::from_args(spec);
}

}  // namespace

py::dtype numpy_dtype(const FieldInfo& f) {
  if (f.dtype == DType::structured) return record_dtype(f);
  if (last_axis_is_element(f)) return py::dtype(fmt::format("S{}", f.shape.back()));
  return scalar_dtype(f.dtype);
}

std::vector<py::ssize_t> numpy_shape(const FieldInfo& f) {
  std::vector<py::ssize_t> shape(f.shape.begin(), f.shape.end());
  if (last_axis_is_element(f) && !shape.empty()) shape.pop_back();
  return shape;
}

const FieldInfo& field_info(const Index& index, const std::string& field) {
  return index.fields()[index.field_id(field)];
}

uint64_t unit_bytes(const FieldInfo& info) {
  if (!info.variable) return info.row_bytes;
  uint64_t unit = dtype_size(info.dtype);
  for (uint64_t d : info.shape) unit *= d;
  if (unit == 0) {
    throw IndexError(fmt::format("field '{}' has an empty element shape", info.name),
                     {.field = info.name});
  }
  return unit;
}

py::array_t<int64_t> as_ids(const py::handle& ids) {
  py::array array = py::array::ensure(ids);
  if (!array) throw UsageError("ids must be a sequence of integer sample ids");
  if (array.ndim() != 1) {
    throw UsageError(fmt::format(
        "ids must be a one-dimensional sequence of sample ids, not {} dimensions", array.ndim()));
  }
  // An empty list becomes a float64 array: no id is no id, whatever its dtype.
  if (array.size() == 0) return py::array_t<int64_t>(0);
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw UsageError(
        fmt::format("ids must be integers, not {}", py::str(array.dtype()).cast<std::string>()));
  }
  auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  const int64_t* id = ints.data();
  for (py::ssize_t i = 0; i < ints.size(); ++i) {
    if (id[i] < 0) throw UsageError(fmt::format("sample id {} is negative", id[i]));
  }
  return ints;
}

py::array destination(const py::object& out, uint64_t bytes, const FieldInfo& field,
                      uint64_t rows) {
  if (out.is_none()) {
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(rows)};
    for (py::ssize_t d : numpy_shape(field)) shape.push_back(d);
    py::array array(numpy_dtype(field), shape);
    // The array comes from the shape, the copy from the index's row sizes: Index::open made
    // them agree, and a disagreement is damage, never a write past the array.
    if (static_cast<uint64_t>(array.nbytes()) != bytes) {
      throw IndexError(
          fmt::format(
              "field '{}' has rows of shape {} but this batch is {} bytes; the index is damaged",
              field.name, py::str(py::tuple(py::cast(field.shape))).cast<std::string>(), bytes),
          {.field = field.name});
    }
    return array;
  }
  if (!py::isinstance<py::array>(out)) {
    throw UsageError(fmt::format("out must be a numpy array or device memory, not {}",
                                 py::str(py::type::of(out).attr("__name__")).cast<std::string>()));
  }
  auto array = py::reinterpret_borrow<py::array>(out);
  if (!(array.flags() & py::array::c_style)) throw UsageError("out must be C-contiguous");
  if (!array.writeable()) throw UsageError("out must be writable");
  check_out_bytes(static_cast<uint64_t>(array.nbytes()), bytes, field);
  return array;
}

void check_out_bytes(uint64_t holds, uint64_t bytes, const FieldInfo& field) {
  if (holds != bytes) {
    throw UsageError(fmt::format("out holds {} bytes; this batch of field '{}' is {} bytes", holds,
                                 field.name, bytes),
                     {.field = field.name});
  }
}

py::array_t<int64_t> offsets_of(std::span<const uint64_t> sizes, uint64_t unit,
                                const std::string& field) {
  py::array_t<int64_t> offsets(static_cast<py::ssize_t>(sizes.size() + 1));
  int64_t* o = offsets.mutable_data();
  o[0] = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] % unit != 0) {
      throw IndexError(
          fmt::format("a row of field '{}' holds {} bytes, not a whole number of {}-byte elements",
                      field, sizes[i], unit),
          {.field = field});
    }
    o[i + 1] = o[i] + static_cast<int64_t>(sizes[i] / unit);
  }
  return offsets;
}

std::unique_lock<std::mutex> PyReader::claim() {
  if (check_open) check_open();
  std::unique_lock lock(busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    throw UsageError(
        "this reader is busy in another thread: a reader belongs to one thread (take one per "
        "thread with reader())");
  }
  return lock;
}

uint64_t batch_bytes(PyReader& r, const std::string& field, const py::handle& ids_obj) {
  if (r.check_open) r.check_open();
  auto ids = as_ids(ids_obj);
  return r.reader.batch_bytes(field, id_span(ids));
}

py::array_t<uint64_t> row_sizes(PyReader& r, const std::string& field, const py::handle& ids_obj) {
  if (r.check_open) r.check_open();
  auto ids = as_ids(ids_obj);
  py::array_t<uint64_t> sizes(ids.size());
  r.reader.row_sizes(field, id_span(ids),
                     {sizes.mutable_data(), static_cast<std::size_t>(ids.size())});
  return sizes;
}

PreparedBatch prepare_batch(PyReader& r, const std::string& field, const py::handle& ids_obj,
                            const py::object& out, bool device_ok) {
  PreparedBatch batch;
  batch.ids = as_ids(ids_obj);
  const auto span = id_span(batch.ids);
  const FieldInfo& info = field_info(*r.index, field);
  batch.bytes = r.reader.batch_bytes(field, span);
  uint64_t rows = span.size();
  if (info.variable) {
    std::vector<uint64_t> sizes(span.size());
    r.reader.row_sizes(field, span, sizes);
    auto starts = offsets_of(sizes, unit_bytes(info), field);
    rows = static_cast<uint64_t>(starts.at(span.size()));
    batch.offsets = std::move(starts);
  }
  // A numpy array never asks for the interface: the host path pays no failed attribute lookup.
  if (!out.is_none() && !py::isinstance<py::array>(out)) {
    if (auto device = device_out(out, batch.bytes, info)) {
      if (!device_ok) {
        throw UsageError(
            "this read fills host memory only: out must be a numpy array, not device memory");
      }
      batch.device = *device;
      batch.dest = out;
      return batch;
    }
  }
  auto array = destination(out, batch.bytes, info, rows);
  batch.host = {static_cast<std::byte*>(array.mutable_data()), batch.bytes};
  batch.dest = std::move(array);
  return batch;
}

}  // namespace ddstage::python
