# Fallback for the small libraries Debian 12 packages but HPC systems (Frontier, Perlmutter)
# often lack: CLI11, yaml-cpp, spdlog with fmt, xxhash, Catch2. Each comes from the system when
# found there; otherwise, with DDSTAGE_FETCH_MISSING, FetchContent builds the upstream release of
# the version Debian 12 ships (the versions the suite is run with) inside this build.
#
# Without network, point FetchContent at local copies of those releases:
#   -DFETCHCONTENT_SOURCE_DIR_CLI11=...  _YAML_CPP  _SPDLOG  _FMT  _XXHASH  _CATCH2
# (scripts/install-deps unpacks Debian's sources of them under /var/cache/ddstage/deps-src/).
#
# Releases are pinned by their git tag: these machines reach no GitHub, so no archive hash was
# computed and none is claimed. The libraries are built position-independent (the project sets
# CMAKE_POSITION_INDEPENDENT_CODE), without their tests, tools or install rules. yaml-cpp, fmt
# and spdlog hold global state (spdlog's logger registry and level): with a shared libcore they
# are built shared too, so that a process holds one copy of each, whoever links them. Static,
# there would be one in libddstage.so and another in the CLI, made one only by symbol
# interposition, which -Bsymbolic or hidden visibility would undo. Their .so files are
# installed beside libddstage, found through the $ORIGIN RUNPATH (cmake/ddstage_rpath.cmake).
# With a static libcore everything lands in one binary and they are static. xxhash (stateless)
# and Catch2 are always static. A static libcore's package would have to export them for apps
# to link: it is then not installed (cmake/ddstage_install.cmake).
include(FetchContent)

option(DDSTAGE_FETCH_MISSING
       "Build CLI11, yaml-cpp, spdlog, fmt, xxhash and Catch2 from pinned upstream releases when the system lacks them"
       ON)

# Content names are chosen so that each FETCHCONTENT_SOURCE_DIR_<NAME> reads plainly.
FetchContent_Declare(cli11 SYSTEM
  GIT_REPOSITORY https://github.com/CLIUtils/CLI11.git GIT_TAG v2.1.2 GIT_SHALLOW TRUE)
FetchContent_Declare(yaml_cpp SYSTEM
  GIT_REPOSITORY https://github.com/jbeder/yaml-cpp.git GIT_TAG yaml-cpp-0.7.0 GIT_SHALLOW TRUE)
FetchContent_Declare(fmt SYSTEM
  GIT_REPOSITORY https://github.com/fmtlib/fmt.git GIT_TAG 9.1.0 GIT_SHALLOW TRUE)
FetchContent_Declare(spdlog SYSTEM
  GIT_REPOSITORY https://github.com/gabime/spdlog.git GIT_TAG v1.10.0 GIT_SHALLOW TRUE)
# xxhash's own CMake (cmake_unofficial/) also builds the xxhsum tool; its one C file is enough.
FetchContent_Declare(xxhash
  GIT_REPOSITORY https://github.com/Cyan4973/xxHash.git GIT_TAG v0.8.1 GIT_SHALLOW TRUE)
FetchContent_Declare(catch2 SYSTEM
  GIT_REPOSITORY https://github.com/catchorg/Catch2.git GIT_TAG v2.13.10 GIT_SHALLOW TRUE)

# Makes content NAME available, or fails naming the Debian package that provides it. With
# SHARED (and a shared libcore) its libraries are shared ones, installed into the libdir.
function(_ddstage_fetch name debian_package)
  cmake_parse_arguments(PARSE_ARGV 2 arg "SHARED" "" "")
  string(TOUPPER ${name} upper)
  string(REPLACE "_" "-" shown ${name})
  if(NOT DDSTAGE_FETCH_MISSING)
    message(FATAL_ERROR "ddstage needs ${shown}, which was not found: install Debian's ${debian_package} "
                        "(scripts/install-deps), or set -DDDSTAGE_FETCH_MISSING=ON to build its upstream release")
  endif()
  # Dependencies' options are set as plain variables; old cmake_minimum_required() lines
  # (yaml-cpp's, Catch2's) would otherwise let option() override them.
  set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)
  set(BUILD_SHARED_LIBS OFF)
  if(arg_SHARED AND DDSTAGE_SHARED)
    set(BUILD_SHARED_LIBS ON)
  endif()
  set(BUILD_TESTING OFF)
  FetchContent_MakeAvailable(${name})
  set_property(GLOBAL APPEND PROPERTY DDSTAGE_FETCHED ${shown})
  if(BUILD_SHARED_LIBS)
    # Only the runtime library: nothing is built against it once installed. In libcore's export
    # set because the export of a shared library names the shared libraries it links, for the
    # linker of an app to find (-rpath-link); the app is not given them to link.
    set_property(TARGET ${shown} PROPERTY PUBLIC_HEADER)
    install(TARGETS ${shown} EXPORT ddstageTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
  endif()
  if(FETCHCONTENT_SOURCE_DIR_${upper})
    set(from "${FETCHCONTENT_SOURCE_DIR_${upper}}")
  else()
    FetchContent_GetProperties(${name} SOURCE_DIR from)
  endif()
  message(STATUS "ddstage: fetched ${shown} (not found on the system) from ${from}")
endfunction()

function(ddstage_require_cli11)
  find_package(CLI11 QUIET)
  if(NOT CLI11_FOUND)
    _ddstage_fetch(cli11 libcli11-dev)  # CLI11::CLI11
  endif()
endfunction()

function(ddstage_require_yaml_cpp)
  find_package(yaml-cpp QUIET)  # 0.7: the target is plain `yaml-cpp`
  if(NOT yaml-cpp_FOUND)
    set(YAML_CPP_BUILD_TOOLS OFF)
    _ddstage_fetch(yaml_cpp libyaml-cpp-dev SHARED)  # yaml-cpp
  endif()
endfunction()

# spdlog always formats with the separate fmt, as Debian's does: ddstage includes <fmt/...>
# itself, which spdlog's bundled copy would not provide.
function(ddstage_require_spdlog)
  find_package(spdlog QUIET)  # finds fmt::fmt with it
  if(spdlog_FOUND)
    return()
  endif()
  find_package(fmt QUIET)
  if(NOT fmt_FOUND)
    _ddstage_fetch(fmt libfmt-dev SHARED)  # fmt::fmt
  endif()
  set(SPDLOG_FMT_EXTERNAL ON)
  _ddstage_fetch(spdlog libspdlog-dev SHARED)  # spdlog::spdlog
endfunction()

# The build links libxxhash as PkgConfig::XXHASH (pkg-config's target, as it ships no CMake
# package); the fetched one takes that name so every user of it stays as it is.
function(ddstage_require_xxhash)
  pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
  if(TARGET PkgConfig::XXHASH)
    return()
  endif()
  _ddstage_fetch(xxhash libxxhash-dev)
  FetchContent_GetProperties(xxhash SOURCE_DIR xxhash_dir)
  add_library(ddstage_xxhash STATIC ${xxhash_dir}/xxhash.c)
  target_include_directories(ddstage_xxhash SYSTEM INTERFACE ${xxhash_dir})
  add_library(PkgConfig::XXHASH ALIAS ddstage_xxhash)
endfunction()

# Catch2::Catch2 and Catch2::Catch2WithMain, and Catch.cmake on the caller's module path.
function(ddstage_require_catch2)
  find_package(Catch2 QUIET)  # its package puts its own directory on the module path
  if(NOT Catch2_FOUND)
    set(CATCH_BUILD_TESTING OFF)
    set(CATCH_BUILD_STATIC_LIBRARY ON)  # Catch2WithMain, as Debian builds it
    _ddstage_fetch(catch2 catch2)
    FetchContent_GetProperties(catch2 SOURCE_DIR catch2_dir)
    list(APPEND CMAKE_MODULE_PATH ${catch2_dir}/contrib)
  endif()
  set(CMAKE_MODULE_PATH ${CMAKE_MODULE_PATH} PARENT_SCOPE)
endfunction()
