-- Lmod module file for ddstage installed by `cmake --install build --prefix PREFIX`.
-- Copy it to a directory on MODULEPATH as ddstage/0.1.0.lua and set the three locals below
-- from the build (ddstage.tcl beside it is the same for Tcl Environment Modules).
-- tests/packaging/check_module_files.py installs a build and checks every path below exists.

help([[
ddstage 0.1.0: stage deep-learning datasets off the parallel file system.
  ddstage --help, man ddstage          the command line
  python3 -c 'import ddstage'          the Python package
  find_package(ddstage) in CMake, or pkg-config --cflags --libs ddstage, for apps
]])
whatis("Name: ddstage")
whatis("Version: 0.1.0")
whatis("Description: stage deep-learning datasets off the parallel file system")
whatis("License: BSD-3-Clause")

-- The prefix given to cmake --install.
local prefix = "/opt/ddstage/0.1.0"
-- CMAKE_INSTALL_LIBDIR in the build's CMakeCache.txt: lib, or lib64 on RHEL and SUSE.
local libdir = "lib"
-- DDSTAGE_INSTALL_PYTHONDIR in CMakeCache.txt: lib/pythonX.Y/site-packages for the Python the
-- module was built for (dist-packages with Debian's python3).
local pythondir = "lib/python3.11/site-packages"

-- The MPI and libfabric ddstage was built against must be the ones at run time: load the
-- site's modules for them first, e.g.
-- depends_on("openmpi/4.1")

prepend_path("PATH", pathJoin(prefix, "bin"))
prepend_path("MANPATH", pathJoin(prefix, "share/man"))
prepend_path("CMAKE_PREFIX_PATH", prefix)
prepend_path("PKG_CONFIG_PATH", pathJoin(prefix, libdir, "pkgconfig"))
prepend_path("PYTHONPATH", pathJoin(prefix, pythondir))
-- No LD_LIBRARY_PATH: the ddstage command and the Python module find libddstage through the
-- RPATH the install gives them. An app linked against libddstage carries its own RPATH (CMake
-- sets it in the build tree; set INSTALL_RPATH when installing the app).

-- Where stores live is per job, on a file system every node of the job sees; a job script
-- sets it (share/ddstage/slurm-job.sh does), not the module:
-- setenv("DDSTAGE_STORE", pathJoin(os.getenv("SCRATCH"), "ddstage-store"))
