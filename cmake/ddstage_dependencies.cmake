# Every dependency comes from a Debian 12 package; see README "Quick start". The small ones
# other systems lack are built from source when missing (cmake/ddstage_fetch.cmake).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/ddstage_fetch.cmake)
ddstage_require_cli11()
ddstage_require_yaml_cpp()
ddstage_require_spdlog()
ddstage_require_xxhash()
if(DDSTAGE_BUILD_TESTS)
  # Here, not in tests/: a fetched Catch2 is then compiled ahead of the sanitizer and warning
  # options of the top-level CMakeLists.txt, as the other fetched libraries are.
  ddstage_require_catch2()
endif()

set(DDSTAGE_HAVE_MPI 0)
if(DDSTAGE_WITH_MPI)
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI REQUIRED COMPONENTS CXX)
  set(DDSTAGE_HAVE_MPI 1)
endif()

set(DDSTAGE_HAVE_FABRIC 0)
if(DDSTAGE_WITH_FABRIC)
  # libfabric ships no CMake config; pkg-config it is.
  pkg_check_modules(FABRIC REQUIRED IMPORTED_TARGET libfabric>=1.17)
  set(DDSTAGE_HAVE_FABRIC 1)
endif()

set(DDSTAGE_HAVE_HDF5 0)
if(DDSTAGE_WITH_HDF5)
  set(HDF5_PREFER_PARALLEL OFF)
  find_package(HDF5 REQUIRED COMPONENTS C)
  set(DDSTAGE_HAVE_HDF5 1)
endif()

set(DDSTAGE_HAVE_CUDA 0)
if(NOT DDSTAGE_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(DDSTAGE_HAVE_CUDA 1)
  elseif(DDSTAGE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DDSTAGE_WITH_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()

# HIP on AUTO only when CUDA is not built: a node has one vendor's GPUs, and a CUDA build
# should not load the ROCm runtime too. Both ON builds both behind the device registry.
set(DDSTAGE_HAVE_HIP 0)
if(DDSTAGE_WITH_HIP STREQUAL "ON" OR (DDSTAGE_WITH_HIP STREQUAL "AUTO" AND NOT DDSTAGE_HAVE_CUDA))
  find_program(DDSTAGE_HIPCC hipcc)
  if(DDSTAGE_HIPCC)
    # Only host calls of the HIP runtime: hip::host compiles them with the C++ compiler.
    find_package(hip CONFIG QUIET)
  endif()
  if(TARGET hip::host)
    set(DDSTAGE_HAVE_HIP 1)
  elseif(DDSTAGE_WITH_HIP STREQUAL "ON")
    message(FATAL_ERROR "DDSTAGE_WITH_HIP=ON but hipcc or HIP's CMake package (hip::host) was not found")
  endif()
endif()

message(STATUS "ddstage: MPI=${DDSTAGE_HAVE_MPI} FABRIC=${DDSTAGE_HAVE_FABRIC} HDF5=${DDSTAGE_HAVE_HDF5} "
               "CUDA=${DDSTAGE_HAVE_CUDA} HIP=${DDSTAGE_HAVE_HIP}")
