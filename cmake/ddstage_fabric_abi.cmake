include(${CMAKE_CURRENT_LIST_DIR}/ddstage_rpath.cmake)  # ddstage_is_implicit_link_directory

# Which libfabric libcore binds, and how. It loads it at run time
# (libcore/src/fabric/fabric_library.cpp) and calls the few functions it exports at the symbol
# versions linking it would have bound: the default version of each in the libfabric whose
# headers the build compiles with, read here from that library's dynamic symbol table. A newer
# libfabric at run time keeps those versions for compatibility. Where they cannot be read (no
# readelf, an unversioned libfabric), the run-time library's default versions are used, with a
# warning.

# The libfabric file pkg-config named (empty without one).
function(ddstage_fabric_library out)
  set(library "")
  foreach(lib IN LISTS FABRIC_LINK_LIBRARIES)
    if(lib MATCHES "libfabric")
      set(library ${lib})
    endif()
  endforeach()
  set(${out} ${library} PARENT_SCOPE)
endfunction()

function(ddstage_fabric_abi source)
  ddstage_fabric_library(library)
  set(symbols "")
  if(library AND CMAKE_READELF)
    execute_process(COMMAND ${CMAKE_READELF} -W --dyn-syms ${library}
                    OUTPUT_VARIABLE symbols ERROR_QUIET)
  endif()
  set(definitions "")
  set(found "")
  set(missing "")
  foreach(function fi_getinfo fi_fabric fi_freeinfo fi_dupinfo fi_strerror fi_version)
    set(version "")
    if(symbols MATCHES " ${function}@@([A-Za-z0-9_.]+)")
      set(version ${CMAKE_MATCH_1})
    else()
      list(APPEND missing ${function})
    endif()
    string(TOUPPER ${function} name)
    list(APPEND definitions "DDSTAGE_${name}_ABI=\"${version}\"")
    list(APPEND found "${function}@${version}")
  endforeach()
  if(missing)
    list(JOIN missing ", " missing)
    message(WARNING "ddstage: the symbol versions of ${missing} could not be read from libfabric "
                    "('${library}', readelf '${CMAKE_READELF}'). They are looked up unversioned, "
                    "so each binds the default version of the libfabric loaded at run time: a "
                    "newer one than these headers may hand back an fi_info of a layout they do "
                    "not describe. Install binutils' readelf, or point pkg-config at the "
                    "libfabric.so the headers belong to.")
  endif()
  list(JOIN found " " found)
  message(STATUS "ddstage: libfabric is loaded at run time, called at ${found}")
  set_source_files_properties(${source} PROPERTIES COMPILE_DEFINITIONS "${definitions}")
endfunction()

# dlopen finds libfabric.so.1 through LD_LIBRARY_PATH first, then the calling object's
# RUNPATH, then the loader cache. A libfabric outside the compiler's (and so the loader's)
# own directories, say /opt/libfabric-1.22/lib, goes into target's RUNPATH, as linking it did:
# else a node with a distro libfabric as well would load that one, perhaps without the site's
# providers, or fail on a symbol version read from the one built against.
function(ddstage_fabric_runpath target)
  ddstage_fabric_library(library)
  if(NOT library)
    return()
  endif()
  get_filename_component(directory ${library} DIRECTORY)
  ddstage_runpath(${target} ${directory})
endfunction()
