#include "store_binding.hpp"

#include <memory>
#include <optional>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "batch.hpp"
#include "ddstage/error.hpp"
#include "ddstage/store.hpp"
#include "settings_of.hpp"

namespace ddstage::python {
namespace {

/// A Store that Python can close before MPI_Finalize (mpi4py finalizes at exit, before the
/// garbage collector would free it): readers share the handle and refuse to read once closed.
struct StoreHandle {
  std::optional<Store> store;

  Store& get() {
    if (!store) throw UsageError("this Store is closed");
    return *store;
  }
};

}  // namespace

void bind_store(py::module_& m) {
  const StoreOptions defaults;
  py::class_<StoreHandle, std::shared_ptr<StoreHandle>>(m, "Store",
                                                        "The embedded store of an MPI job.")
      .def(py::init([](int fortran_comm, uint64_t max_round_bytes, bool direct_on_node,
                       bool allow_stale, uint64_t mem_limit, const std::string& transport,
                       const std::map<std::string, std::string>& settings) {
             auto handle = std::make_shared<StoreHandle>();
             StoreOptions options{.max_round_bytes = max_round_bytes,
                                  .direct_on_node = direct_on_node,
                                  .allow_stale = allow_stale,
                                  .mem_limit = mem_limit,
                                  .transport = transport,
                                  .settings = settings_of(settings)};
             py::gil_scoped_release released;  // collective: other Python threads keep running
             handle->store.emplace(fortran_comm, options);
             return handle;
           }),
           py::arg("fortran_comm"), py::arg("max_round_bytes") = defaults.max_round_bytes,
           py::arg("direct_on_node") = defaults.direct_on_node,
           py::arg("allow_stale") = defaults.allow_stale, py::arg("mem_limit") = defaults.mem_limit,
           py::arg("transport") = defaults.transport,
           py::arg("settings") = std::map<std::string, std::string>{})
      .def_property_readonly("rank", [](StoreHandle& h) { return h.get().rank(); })
      .def_property_readonly("size", [](StoreHandle& h) { return h.get().size(); })
      .def_property_readonly("thread_level", [](StoreHandle& h) { return h.get().thread_level(); })
      .def_property_readonly("closed", [](const StoreHandle& h) { return !h.store; })
      .def(
          "load",
          [](StoreHandle& h, const std::filesystem::path& index, const std::string& name,
             bool verify) {
            Store& store = h.get();
            {
              py::gil_scoped_release released;
              store.load(index, name, verify);
            }
            return name.empty() ? Index::open(index).manifest().name : name;
          },
          py::arg("index"), py::arg("name") = "", py::arg("verify") = false)
      .def(
          "samples",
          [](StoreHandle& h, const std::string& name) { return h.get().index(name).samples(); },
          py::arg("name"))
      .def(
          "fields",
          [](StoreHandle& h, const std::string& name) {
            const auto fields = h.get().index(name).fields();
            return std::vector<FieldInfo>(fields.begin(), fields.end());
          },
          py::arg("name"))
      .def(
          "reader",
          [](const std::shared_ptr<StoreHandle>& h, const std::string& name) {
            Store& store = h->get();
            return std::make_unique<PyReader>(store.reader(name), store.index(name),
                                              [h] { h->get(); });
          },
          py::arg("name"))
      .def(
          "get_batch_collective",
          [](StoreHandle& h, const std::string& name, PyReader& sizes, const std::string& field,
             const py::handle& ids, const py::object& out) {
            Store& store = h.get();
            return get_batch(
                sizes, field, ids, out,
                [&](std::span<const uint64_t> span, std::span<std::byte> dest) {
                  store.get_batch_collective(name, field, span, dest);
                },
                [&](const std::exception_ptr& failure) {
                  py::gil_scoped_release released;
                  store.fail_batch_collective(failure);
                });
          },
          py::arg("name"), py::arg("reader"), py::arg("field"), py::arg("ids"),
          py::arg("out") = py::none(),
          "Collective: reader (one of this dataset's) sizes the batch and is held for the call.")
      .def("close", [](StoreHandle& h) {
        py::gil_scoped_release released;
        h.store.reset();
      });
}

}  // namespace ddstage::python
