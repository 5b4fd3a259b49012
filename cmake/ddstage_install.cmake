# Installing libcore as a CMake package: an app does
#   find_package(ddstage REQUIRED)
#   target_link_libraries(app PRIVATE ddstage::core)
# Included from the top-level CMakeLists.txt after libcore/ is added. tests/install/ proves
# that the installed package builds and runs a separate project (examples/reader-app/).
include(CMakePackageConfigHelpers)

set(DDSTAGE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddstage
    CACHE STRING "Where ddstageConfig.cmake is installed, relative to the prefix")
mark_as_advanced(DDSTAGE_INSTALL_CMAKEDIR)

# A static libcore's PRIVATE dependencies reach the export as $<LINK_ONLY:...> (CMake adds that
# for static libraries), so every target it names must exist in the consumer.
# ddstageConfig.cmake.in knows how to find the ones below; anything else is flagged here, at
# configure time (and tests/install fails), rather than at some app's link. A shared libcore
# exports none of them: its apps need only Threads, which its public headers use.
# Libraries built from source (cmake/ddstage_fetch.cmake) belong to this build only. A static
# libcore's package would have to export them: it is not installed then (pip's build, the one
# that builds libcore static, never installs it). A shared libcore links them privately: their
# .so files are installed beside it, and it finds them there through its own RUNPATH.
get_property(_ddstage_fetched GLOBAL PROPERTY DDSTAGE_FETCHED)
get_target_property(_ddstage_core_links ddstage_core LINK_LIBRARIES)
set(_ddstage_core_fetched)
foreach(_lib IN LISTS _ddstage_core_links)
  if(TARGET ${_lib})
    get_target_property(_imported ${_lib} IMPORTED)
    if(NOT _imported)
      list(APPEND _ddstage_core_fetched ${_lib})
    endif()
  endif()
endforeach()
set(_ddstage_package ON)
if(_ddstage_core_fetched AND NOT DDSTAGE_SHARED)
  set(_ddstage_package OFF)
  list(JOIN _ddstage_core_fetched ", " _ddstage_core_fetched)
  message(STATUS "ddstage: a static libcore is built with the fetched ${_ddstage_core_fetched}: its CMake "
                 "and pkg-config packages are not installed (they would need those installed too)")
elseif(_ddstage_fetched AND DDSTAGE_SHARED)
  include(${CMAKE_CURRENT_LIST_DIR}/ddstage_rpath.cmake)
  ddstage_install_rpath(ddstage_core ${CMAKE_INSTALL_LIBDIR})
endif()

set(DDSTAGE_CORE_NEEDS_MPI 0)
set(DDSTAGE_CORE_NEEDS_CUDA 0)
set(DDSTAGE_CORE_NEEDS_HIP 0)
if(NOT DDSTAGE_SHARED AND _ddstage_package)
  # ${CMAKE_DL_LIBS} (dlopen of libfabric) is a plain system library name: nothing to find.
  set(_ddstage_known_links yaml-cpp PkgConfig::XXHASH spdlog::spdlog Threads::Threads
      MPI::MPI_CXX CUDA::cudart_static hip::host ${CMAKE_DL_LIBS})
  foreach(_lib IN LISTS _ddstage_core_links)
    if(_lib STREQUAL "MPI::MPI_CXX")
      set(DDSTAGE_CORE_NEEDS_MPI 1)
    elseif(_lib STREQUAL "CUDA::cudart_static")
      set(DDSTAGE_CORE_NEEDS_CUDA 1)
    elseif(_lib STREQUAL "hip::host")
      set(DDSTAGE_CORE_NEEDS_HIP 1)
    endif()
    if(NOT _lib IN_LIST _ddstage_known_links AND NOT _lib MATCHES "^\\$<BUILD_INTERFACE:")
      message(WARNING "ddstage_core links '${_lib}', which the installed package cannot find: "
              "add a find_dependency for it to cmake/ddstageConfig.cmake.in and to the list in "
              "cmake/ddstage_install.cmake (or link it as $<BUILD_INTERFACE:...> if it is header-only).")
    endif()
  endforeach()
endif()

# An app of a sanitized libcore links the sanitizer runtime too: a static one holds
# instrumented objects, and a shared one built by clang leaves the runtime's symbols for the
# executable to define (GCC's libasan must also come first in the program's library list).
if(DDSTAGE_SANITIZE)
  target_link_options(ddstage_core INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
endif()

set(_ddstage_export EXPORT ddstageTargets)
if(NOT _ddstage_package)
  set(_ddstage_export)
endif()
install(TARGETS ddstage_core ${_ddstage_export}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers, and the generated config.hpp beside them: both resolve as <ddstage/...>
# through the one $<INSTALL_INTERFACE:include> that libcore already declares.
# ddstage/tool/ is what only the CLI, the benches, the formats and the tests use (the store
# server, shard loading, fabric floors...): it stays in the source tree, so an app sees only
# the app API behind <ddstage/ddstage.hpp> and can rely on it alone. Without MPI, the
# headers of the MPI-only parts (the embedded Store, <mpi.h> conveniences) would declare what
# the library does not contain: leave them out too.
set(_ddstage_header_excludes PATTERN tool EXCLUDE)
if(NOT DDSTAGE_HAVE_MPI)
  foreach(_h mpi.hpp store.hpp)
    list(APPEND _ddstage_header_excludes PATTERN ${_h} EXCLUDE)
  endforeach()
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libcore/include/ddstage
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" ${_ddstage_header_excludes})
install(FILES ${PROJECT_BINARY_DIR}/generated/ddstage/config.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddstage)

if(NOT _ddstage_package)
  return()
endif()
install(EXPORT ddstageTargets
  NAMESPACE ddstage::
  FILE ddstageTargets.cmake
  DESTINATION ${DDSTAGE_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/ddstageConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/ddstageConfig.cmake
  INSTALL_DESTINATION ${DDSTAGE_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/ddstageConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/ddstageConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/ddstageConfigVersion.cmake
  DESTINATION ${DDSTAGE_INSTALL_CMAKEDIR})

# pkg-config: `pkg-config --cflags --libs ddstage` for apps built without CMake. Its prefix is
# found relative to the .pc file (${pcfiledir}), so it stays right under `cmake --install
# --prefix` and in a relocated tree.
cmake_path(ABSOLUTE_PATH CMAKE_INSTALL_LIBDIR BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX} NORMALIZE
           OUTPUT_VARIABLE _ddstage_pc_dir)
file(RELATIVE_PATH DDSTAGE_PC_PREFIX ${_ddstage_pc_dir}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" DDSTAGE_PC_PREFIX "${DDSTAGE_PC_PREFIX}")
cmake_path(RELATIVE_PATH _ddstage_pc_dir BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX}
           OUTPUT_VARIABLE DDSTAGE_PC_LIBDIR)
cmake_path(ABSOLUTE_PATH CMAKE_INSTALL_INCLUDEDIR BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX} NORMALIZE
           OUTPUT_VARIABLE _ddstage_pc_include)
cmake_path(RELATIVE_PATH _ddstage_pc_include BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX}
           OUTPUT_VARIABLE DDSTAGE_PC_INCLUDEDIR)
# A static libcore's own dependencies, for `pkg-config --static`: the modules that ship a .pc
# file, and MPI's, the CUDA runtime's and HIP's libraries as CMake found them.
set(DDSTAGE_PC_REQUIRES_PRIVATE "")
set(DDSTAGE_PC_LIBS_PRIVATE "")
if(NOT DDSTAGE_SHARED)
  set(DDSTAGE_PC_REQUIRES_PRIVATE "yaml-cpp spdlog libxxhash")
  set(_ddstage_pc_libs)
  if(DDSTAGE_CORE_NEEDS_MPI)
    list(APPEND _ddstage_pc_libs ${MPI_CXX_LIBRARIES})
  endif()
  if(DDSTAGE_CORE_NEEDS_CUDA)
    list(APPEND _ddstage_pc_libs ${CUDA_cudart_static_LIBRARY} -lrt)
  endif()
  if(DDSTAGE_CORE_NEEDS_HIP)
    get_target_property(_ddstage_hip_library hip::amdhip64 LOCATION)
    list(APPEND _ddstage_pc_libs ${_ddstage_hip_library})
  endif()
  foreach(_lib IN LISTS CMAKE_DL_LIBS)
    list(APPEND _ddstage_pc_libs -l${_lib})
  endforeach()
  list(JOIN _ddstage_pc_libs " " DDSTAGE_PC_LIBS_PRIVATE)
endif()
# The sanitizer runtime, for the same reason as the CMake package's link option above.
set(DDSTAGE_PC_LIBS_SANITIZE "")
if(DDSTAGE_SANITIZE)
  set(DDSTAGE_PC_LIBS_SANITIZE " -fsanitize=address,undefined")
endif()
configure_file(cmake/ddstage.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/ddstage.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/ddstage.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
