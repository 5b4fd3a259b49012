# Faster clean builds of our own targets (not of the libraries cmake/ddstage_fetch.cmake builds):
# - DDSTAGE_PCH: every C++ target precompiles the standard headers most files include. Parsing
#   them is about a third of a file's compile time at -O0 (the ASan build), a sixth at -O3.
# - DDSTAGE_UNITY: each target compiles its sources in batches of DDSTAGE_UNITY_BATCH, one
#   translation unit per batch, so the third-party headers every file includes (spdlog, fmt,
#   yaml-cpp, CLI11, Catch2, pybind11) are parsed once a batch instead of once a file.
# scripts/build turns both on. Off by default: a precompiled header is force-included and a batch
# shares one translation unit, so a file missing an include of its own would still compile; and
# ccache does not cache files built with a precompiled header unless told to. Two files of one
# target must not define the same name at namespace scope, anonymous namespaces included (the
# formats' detect/flatten carry the format's name for that); CMake compiles a file with compile
# definitions of its own alone (fabric_library.cpp). The unit tests' helpers shared by several files
# live in tests/unit/test_support.hpp, not in a copy per file.
# Only standard headers are precompiled: third-party ones depend on definitions that differ by target.
set(DDSTAGE_PCH_HEADERS
    <algorithm> <chrono> <cstdint> <cstring> <filesystem> <functional> <map> <memory> <mutex>
    <optional> <span> <string> <string_view> <thread> <vector>)
set(DDSTAGE_UNITY_BATCH 16 CACHE STRING "Sources per translation unit of a unity build (DDSTAGE_UNITY)")

function(ddstage_fast_build dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(sources ${target} SOURCES)
    if(type MATCHES "LIBRARY$|EXECUTABLE" AND NOT type STREQUAL "INTERFACE_LIBRARY"
       AND sources MATCHES "\\.(cpp|cc)(;|$)")
      if(DDSTAGE_PCH)
        target_precompile_headers(${target} PRIVATE ${DDSTAGE_PCH_HEADERS})
      endif()
      if(DDSTAGE_UNITY)
        set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${DDSTAGE_UNITY_BATCH})
        # GCC takes a .cpp included into the batch's file for a header, and warns of each class
        # there with a member of an anonymous-namespace type, as it would in a real header.
        if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
          target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
        endif()
      endif()
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR ${subdir} ours)
    cmake_path(IS_PREFIX PROJECT_BINARY_DIR ${subdir} fetched)
    if(ours AND NOT fetched)
      ddstage_fast_build(${subdir})
    endif()
  endforeach()
endfunction()

ddstage_fast_build(${PROJECT_SOURCE_DIR})
