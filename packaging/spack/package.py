# Spack package for ddstage, kept with the sources so that it follows the CMake options.
# Use it from a repository of your own until it is in Spack's builtin one:
#   spack repo create myrepo && spack repo add myrepo
#   cp -r packaging/spack myrepo/packages/ddstage
#   spack install ddstage +cuda cuda_arch=90
# tests/packaging/check_spack_recipe.py checks its variants and dependencies against the
# CMake files (Spack itself is not installed where the test suite runs).
#
# SPDX-License-Identifier: BSD-3-Clause

from spack.package import *


class Ddstage(CMakePackage, CudaPackage, ROCmPackage):
    """Stage deep-learning datasets off the parallel file system: flatten a dataset into a
    byte-offset index once, serve it from an in-memory store across MPI ranks, and read
    batches with one-sided reads (shared memory, libfabric, MPI RMA) into host or GPU memory."""

    # PLACEHOLDER: the project has no public home yet; set both to the real repository.
    homepage = "https://example.org/ddstage"
    git = "https://example.org/ddstage.git"

    license("BSD-3-Clause")

    version("main", branch="main")

    variant("python", default=True, description="The ddstage Python package (pybind11)")
    variant("mpi", default=True, description="The store server, MPI RMA transport and embedded Store")
    variant("fabric", default=True, description="The libfabric transport (reads across nodes)")
    variant("hdf5", default=True, description="HDF5 as a source format of flatten")
    variant("shared", default=True, description="libddstage as a shared library (static when off)")

    depends_on("cmake@3.25:", type="build")
    depends_on("pkgconfig", type="build")  # libxxhash, libfabric and libarchive are found with it

    depends_on("cli11")
    depends_on("yaml-cpp")
    # The Python module formats with fmt::fmt, which spdlog's package provides only with an
    # external fmt (Debian's spdlog is built that way too).
    depends_on("spdlog+fmt_external")
    depends_on("fmt")
    depends_on("xxhash")
    depends_on("zlib-api")
    depends_on("libarchive")  # compressed tar shards
    depends_on("catch2@2.13:2", type="test")  # the unit tests use Catch2 v2's API

    depends_on("mpi", when="+mpi")
    depends_on("libfabric@1.17:", when="+fabric")
    # Serial HDF5: flatten reads files, it runs no MPI-IO.
    depends_on("hdf5~mpi", when="+hdf5")
    depends_on("hip", when="+rocm")

    extends("python", when="+python")
    depends_on("python@3.9:", when="+python", type=("build", "link", "run"))
    depends_on("py-pybind11", when="+python", type="build")
    depends_on("py-numpy", when="+python", type="run")

    def cmake_args(self):
        spec = self.spec
        # CUDA, HIP and PYTHON are ON/OFF/AUTO strings: AUTO would switch a feature on or off
        # by whatever happens to be visible, so the spec decides, explicitly. cuda_arch and
        # amdgpu_target are not passed: ddstage compiles no device code, it only calls the
        # CUDA and HIP runtimes from the host.
        def on_off(variant):
            return "ON" if spec.satisfies(f"+{variant}") else "OFF"

        args = [
            self.define_from_variant("DDSTAGE_WITH_MPI", "mpi"),
            self.define_from_variant("DDSTAGE_WITH_FABRIC", "fabric"),
            self.define_from_variant("DDSTAGE_WITH_HDF5", "hdf5"),
            self.define_from_variant("DDSTAGE_SHARED", "shared"),
            self.define("DDSTAGE_WITH_CUDA", on_off("cuda")),
            self.define("DDSTAGE_WITH_HIP", on_off("rocm")),
            self.define("DDSTAGE_WITH_PYTHON", on_off("python")),
            self.define("DDSTAGE_BUILD_TESTS", self.run_tests),
            # Spack provides every dependency: one it did not is an error, never a download.
            self.define("DDSTAGE_FETCH_MISSING", False),
        ]
        if spec.satisfies("+python"):
            args.append(self.define("Python3_EXECUTABLE", spec["python"].command.path))
        return args
