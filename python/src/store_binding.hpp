// The embedded Store for Python (builds with MPI only). No mpi.h: mpi4py hands over its
// communicator as a Fortran handle (comm.py2f()), which is what Store takes.
#pragma once

#include <pybind11/pybind11.h>

namespace ddstage::python {

void bind_store(pybind11::module_& m);

}  // namespace ddstage::python
