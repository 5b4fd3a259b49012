// ddstage._ddstage: libcore's client, readers and (with MPI) the embedded Store for Python.
// The pure-Python package (python/ddstage/) builds the user-facing API on top of it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>

#include "batch.hpp"
#include "ddstage/client.hpp"
#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/origin_dataset.hpp"
#include "ddstage/profile.hpp"
#include "settings_of.hpp"
#include "store_binding.hpp"

namespace ddstage::python {
namespace {

/// Python classes for libcore's errors: Error is a RuntimeError; UsageError (the caller's
/// input: exit code 2 in the CLI) is also a ValueError; ChecksumError is a run-time Error.
void bind_errors(py::module_& m) {
  // Never freed: exception classes live as long as the interpreter.
  static PyObject* error = PyErr_NewException("ddstage.Error", PyExc_RuntimeError, nullptr);
  static PyObject* usage = PyErr_NewException(
      "ddstage.UsageError",
      py::make_tuple(py::handle(error), py::handle(PyExc_ValueError)).release().ptr(), nullptr);
  static PyObject* checksum = PyErr_NewException("ddstage.ChecksumError", error, nullptr);
  m.add_object("Error", py::handle(error));
  m.add_object("UsageError", py::handle(usage));
  m.add_object("ChecksumError", py::handle(checksum));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ChecksumError& e) {
      PyErr_SetString(checksum, e.what());
    } catch (const Error& e) {
      PyErr_SetString(e.kind() == ErrorKind::usage ? usage : error, e.what());
    }
  });
}

void bind_field(py::module_& m) {
  py::class_<FieldInfo>(m, "FieldInfo", "One field of every sample: element type and row shape.")
      .def_readonly("name", &FieldInfo::name)
      .def_property_readonly(
          "dtype", [](const FieldInfo& f) { return numpy_dtype(f); },
          "numpy dtype of the elements (opaque bytes are uint8, text is S<n>, a record is a "
          "structured dtype)")
      .def_property_readonly(
          "shape", [](const FieldInfo& f) { return py::tuple(py::cast(numpy_shape(f))); },
          "numpy shape of one row; for a variable field, of one element of its first axis")
      .def_readonly("encoding", &FieldInfo::encoding,
                    "'ascii' or 'utf-8' for text, empty for anything else")
      .def_property_readonly(
          "enum_names",
          [](const FieldInfo& f) {
            py::dict names;
            for (const auto& e : f.enum_names) names[py::str(e.name)] = e.value;
            return names;
          },
          "an enum's names and values ({} unless the field was an enum)")
      .def_readonly("variable", &FieldInfo::variable, "whether rows differ in length")
      .def_readonly("row_bytes", &FieldInfo::row_bytes, "bytes per row; 0 when variable")
      .def_readonly("source", &FieldInfo::source)
      .def("__repr__", [](const FieldInfo& f) {
        return "FieldInfo(" + f.name + ", " + std::string(dtype_name(f.dtype)) +
               (f.variable ? ", variable" : "") + ")";
      });
}

std::vector<FieldInfo> fields_of(const Index& index) {
  return {index.fields().begin(), index.fields().end()};
}

/// The store directory a Client without one reads: the `store` setting (DDSTAGE_STORE, as for
/// the CLI's --store), or a UsageError saying how to name one.
std::filesystem::path store_of(const Settings& settings) {
  std::string dir = settings.get_string("store");
  if (dir.empty()) {
    throw UsageError(
        "no store given: pass Client(store=DIR), or set DDSTAGE_STORE (the setting 'store')");
  }
  return dir;
}

void bind_reader(py::module_& m) {
  py::class_<PyReader>(m, "Reader",
                       "Reads batches of one dataset, served or embedded; one per thread.")
      .def("batch_bytes", &batch_bytes, py::arg("field"), py::arg("ids"))
      .def("row_sizes", &row_sizes, py::arg("field"), py::arg("ids"))
      .def(
          "get_batch",
          [](PyReader& r, const std::string& field, const py::handle& ids, const py::object& out,
             bool verify) {
            return get_batch(
                r, field, ids, out,
                [&](auto span, const auto& dest) { r.reader.get_batch(field, span, dest, verify); },
                [](const std::exception_ptr&) {});
          },
          py::arg("field"), py::arg("ids"), py::arg("out") = py::none(), py::arg("verify") = false);
}

void bind_client(py::module_& m) {
  py::class_<Dataset>(m, "Dataset", "A dataset of a running store.")
      .def_property_readonly("name", &Dataset::name)
      .def_property_readonly("samples", [](const Dataset& d) { return d.index().samples(); })
      .def_property_readonly("fields", [](const Dataset& d) { return fields_of(d.index()); })
      .def("reader",
           [](const Dataset& d) { return std::make_unique<PyReader>(d.reader(), d.index()); });

  py::class_<OriginDataset>(m, "OriginDataset",
                            "A flattened dataset read from its origin files, without a store.")
      .def(py::init([](const std::filesystem::path& path,
                       const std::map<std::string, std::string>& settings) {
             return OriginDataset(path, settings_of(settings));
           }),
           py::arg("path"), py::arg("settings") = std::map<std::string, std::string>{})
      .def_property_readonly("name", &OriginDataset::name)
      .def_property_readonly("samples", [](const OriginDataset& d) { return d.index().samples(); })
      .def_property_readonly("fields", [](const OriginDataset& d) { return fields_of(d.index()); })
      .def("reader", [](const OriginDataset& d) {
        return std::make_unique<PyReader>(d.reader(), d.index());
      });

  py::class_<Client>(m, "Client", "A client of a store started by `ddstage serve`; needs no MPI.")
      .def(py::init([](const std::optional<std::filesystem::path>& store,
                       const std::map<std::string, std::string>& settings) {
             Settings resolved = settings_of(settings);
             const auto dir = store ? *store : store_of(resolved);
             return Client(dir, std::move(resolved));
           }),
           py::arg("store") = py::none(),
           py::arg("settings") = std::map<std::string, std::string>{})
      .def("open", &Client::open, py::arg("name"));
}

/// The read profile (ddstage/profile.hpp) as plain Python values: figures in seconds and
/// microseconds, keyed by stage and path name.
py::dict profile_snapshot() {
  const ProfileReport r = profile::snapshot();
  py::dict stages;
  for (std::size_t s = 0; s < profile_stage_count; ++s) {
    const LatencyHistogram& h = r.stage_ns[s];
    if (h.count() == 0) continue;
    py::dict figures;
    figures["batches"] = h.count();
    figures["total_s"] = static_cast<double>(h.sum()) / 1e9;
    figures["mean_us"] = h.mean() / 1e3;
    figures["p50_us"] = static_cast<double>(h.percentile(0.5)) / 1e3;
    figures["p99_us"] = static_cast<double>(h.percentile(0.99)) / 1e3;
    figures["max_us"] = static_cast<double>(h.max()) / 1e3;
    stages[py::str(std::string(stage_name(static_cast<ProfileStage>(s))))] = figures;
  }
  py::dict paths;
  for (const auto& [name, count] : r.paths) paths[py::str(name)] = count;
  py::dict out;
  out["batches"] = r.batches;
  out["rows"] = r.rows;
  out["bytes"] = r.bytes;
  out["seconds"] = static_cast<double>(r.batch_ns.sum()) / 1e9;
  out["stages"] = stages;
  out["paths"] = paths;
  return out;
}

void bind_profile(py::module_& m) {
  m.def("profile_enable", &profile::enable, py::arg("on") = true,
        "Collect the read profile from now on (or stop, with on=False).");
  m.def("profile_reset", &profile::reset, "Forget the profile collected so far.");
  m.def("profile_snapshot", &profile_snapshot,
        "The read profile so far, over every thread, as a dict.");
  m.def(
      "profile_report", [] { return profile::format(profile::snapshot()); },
      "The read profile so far as the table DDSTAGE_PROFILE prints.");
}

}  // namespace
}  // namespace ddstage::python

PYBIND11_MODULE(_ddstage, m) {
  using namespace ddstage::python;
  m.doc() = "libcore bindings; use the ddstage package instead of this module";
  m.attr("__version__") = DDSTAGE_VERSION;
  m.attr("HAVE_MPI") = bool(DDSTAGE_HAVE_MPI);
  bind_errors(m);
  bind_field(m);
  bind_reader(m);
  bind_client(m);
  bind_profile(m);
#if DDSTAGE_HAVE_MPI
  bind_store(m);
#endif
}
