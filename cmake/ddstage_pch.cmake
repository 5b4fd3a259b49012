# DDSTAGE_PCH: every C++ target precompiles the standard headers most files include. Parsing them
# is about a third of a file's compile time at -O0 (the ASan build), a sixth at -O3; scripts/test turns
# it on. Off by default: a precompiled header is force-included, so a file missing one of these
# includes would still compile, and ccache does not cache files built with it unless told to.
# Only standard headers: third-party ones (fmt, spdlog) depend on definitions that differ by target.
set(DDSTAGE_PCH_HEADERS
    <algorithm> <chrono> <cstdint> <cstring> <filesystem> <functional> <map> <memory> <mutex>
    <optional> <span> <string> <string_view> <thread> <vector>)

function(ddstage_precompile_headers dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(sources ${target} SOURCES)
    if(type MATCHES "LIBRARY$|EXECUTABLE" AND NOT type STREQUAL "INTERFACE_LIBRARY"
       AND sources MATCHES "\\.(cpp|cc)(;|$)")
      target_precompile_headers(${target} PRIVATE ${DDSTAGE_PCH_HEADERS})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    # Not the libraries cmake/ddstage_fetch.cmake builds from elsewhere or into the build tree.
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR ${subdir} ours)
    cmake_path(IS_PREFIX PROJECT_BINARY_DIR ${subdir} fetched)
    if(ours AND NOT fetched)
      ddstage_precompile_headers(${subdir})
    endif()
  endforeach()
endfunction()

ddstage_precompile_headers(${PROJECT_SOURCE_DIR})
