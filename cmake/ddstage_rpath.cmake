# Where an installed binary finds a shared libcore: its INSTALL_RPATH names libddstage.so's
# directory relative to its own ($ORIGIN), so the installed tree runs without LD_LIBRARY_PATH
# and stays runnable when moved as a whole (`cmake --install --prefix`, a Spack or pip prefix).
# The build tree needs nothing: CMake's build RPATH already names libcore's build directory.
include_guard(GLOBAL)

# Whether directory is one of the compiler's, and so the loader's, own: a RUNPATH entry for it
# would change nothing.
function(ddstage_is_implicit_link_directory directory out)
  get_filename_component(real ${directory} REALPATH)
  foreach(implicit IN LISTS CMAKE_C_IMPLICIT_LINK_DIRECTORIES CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    get_filename_component(implicit ${implicit} REALPATH)
    if(real STREQUAL implicit)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# target, built and installed, finds libraries in directory, an absolute path outside this
# build (a library found installed), unless the loader looks there anyway.
function(ddstage_runpath target directory)
  ddstage_is_implicit_link_directory(${directory} implicit)
  if(implicit)
    return()
  endif()
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH ${directory})
  set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH ${directory})
  # RUNPATH, not RPATH: LD_LIBRARY_PATH still comes first, as it did for the linked library.
  target_link_options(${target} PRIVATE LINKER:--enable-new-dtags)
endfunction()

# target: installed into destination (relative to the prefix, or absolute).
function(ddstage_install_rpath target destination)
  if(NOT DDSTAGE_SHARED)
    return()
  endif()
  # A /usr install, as Debian packages, needs no entry.
  ddstage_is_implicit_link_directory(${CMAKE_INSTALL_FULL_LIBDIR} implicit)
  if(implicit)
    return()
  endif()
  cmake_path(ABSOLUTE_PATH destination BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX} NORMALIZE
             OUTPUT_VARIABLE from)
  file(RELATIVE_PATH relative ${from} ${CMAKE_INSTALL_FULL_LIBDIR})
  if(relative STREQUAL "")
    set(relative .)
  endif()
  set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${relative}")
endfunction()
