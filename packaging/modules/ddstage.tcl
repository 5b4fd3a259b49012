#%Module1.0
# Tcl Environment Modules file for ddstage installed by `cmake --install build --prefix PREFIX`:
# the same as ddstage.lua (Lmod), whose comments say where each value comes from.
# Copy it to a directory on MODULEPATH as ddstage/0.1.0 and set the three variables below.

proc ModulesHelp { } {
    puts stderr "ddstage 0.1.0: stage deep-learning datasets off the parallel file system."
    puts stderr "  ddstage --help, man ddstage; python3 -c 'import ddstage';"
    puts stderr "  find_package(ddstage) in CMake or pkg-config --cflags --libs ddstage for apps"
}
module-whatis "ddstage 0.1.0: stage deep-learning datasets off the parallel file system (BSD-3-Clause)"

set prefix /opt/ddstage/0.1.0
set libdir lib
set pythondir lib/python3.11/site-packages

# Load the MPI and libfabric modules ddstage was built against first, e.g.
# prereq openmpi/4.1

prepend-path PATH $prefix/bin
prepend-path MANPATH $prefix/share/man
prepend-path CMAKE_PREFIX_PATH $prefix
prepend-path PKG_CONFIG_PATH $prefix/$libdir/pkgconfig
prepend-path PYTHONPATH $prefix/$pythondir
# No LD_LIBRARY_PATH: the command and the Python module find libddstage through their RPATH.
# DDSTAGE_STORE is per job (a job script sets it), not set here.
