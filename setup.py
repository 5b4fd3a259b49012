"""The compiled half of `pip install .`: CMake builds the module ddstage._ddstage for the Python
that runs pip, and setuptools packs it with python/ddstage/ (metadata: pyproject.toml).

Two paths; `pip install -v` shows which one was taken, in a line that starts with "ddstage:".
- An installed libddstage (`cmake --install`, Spack, a module file), of this version's
  major.minor, that CMake's find_package(ddstage) finds (CMAKE_PREFIX_PATH, ddstage_DIR, or the
  prefix of a `ddstage` on PATH): only the module is built (python/CMakeLists.txt on its own), in
  about a minute, and it loads that libddstage.so at run time from where it was found (RUNPATH).
  The wheel is then for machines that see that prefix at the same path.
- None, or DDSTAGE_PIP_FROM_SOURCE=1: the whole project is configured and libcore is built too,
  linked into the module statically (-DDDSTAGE_SHARED=OFF), so the wheel carries everything
  ddstage itself needs. That takes many minutes (20 on 2 cores); `pip wheel` builds a wheel once
  to install anywhere later.
CMAKE_ARGS (the variable scikit-build and conda-build read) is appended to CMake's arguments in
both, so a site can turn features off in the second (CMAKE_ARGS="-DDDSTAGE_WITH_MPI=OFF"; the
first takes the installed library's) or point the first at a prefix
(CMAKE_ARGS="-DCMAKE_PREFIX_PATH=/opt/ddstage").
CMake builds in a temporary directory, and setuptools' own build/ and .egg-info go there too,
so nothing lands in the source tree (nor in a CMake build/ directory there)."""
import atexit
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# pip imports setuptools before this file runs, so only a missing wheel package can be told
# here (setuptools before 70.1 builds wheels with it).
if not (importlib.util.find_spec("wheel") or importlib.util.find_spec("setuptools.command.bdist_wheel")):
    sys.exit("ddstage: pip needs setuptools and wheel to build: apt-get install python3-setuptools python3-wheel "
             "(Debian's python3), or python -m pip install setuptools wheel (a venv, pyenv, conda)")

ROOT = Path(__file__).resolve().parent
SCRATCH = Path(tempfile.mkdtemp(prefix="ddstage-pip-"))
atexit.register(shutil.rmtree, SCRATCH, True)


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(\s*ddstage\s+VERSION\s+([0-9.]+)", text).group(1)


def cached(build, name):
    """The value of name in build's CMakeCache.txt (None when absent)."""
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        for line in cache.read_text().splitlines():
            if line.startswith(name + ":"):
                return line.partition("=")[2]
    return None


def say(line):
    print(f"ddstage: {line}", flush=True)  # flushed: CMake's output comes after it, not before


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # The module in CMake's build tree is what pip installs: it is linked with its install
        # RUNPATH, not with the build one that CMake pads for rewriting at install time (a
        # trailing empty entry: the current directory).
        common = [f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release",
                  "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", *shlex.split(os.environ.get("CMAKE_ARGS", ""))]
        if os.environ.get("DDSTAGE_PIP_FROM_SOURCE", "0") not in ("", "0"):
            say("DDSTAGE_PIP_FROM_SOURCE is set: building libcore too (minutes)")
            build = self.configure_project(common)
        else:
            build = self.configure_module(common)
            if build is None:
                say(f"no installed libddstage {cmake_version()} or compatible found (CMAKE_PREFIX_PATH, "
                    "ddstage_DIR): building libcore too (minutes)")
                build = self.configure_project(common)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "ddstage_python", "--parallel", jobs],
                       check=True)
        built = list(build.glob("**/ddstage/_ddstage*.so"))
        if len(built) != 1:
            sys.exit(f"ddstage: expected one _ddstage*.so from CMake, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)

    def configure_module(self, common):
        """python/ as a project of its own, against an installed libddstage: its build directory,
        or None when none was found."""
        build = SCRATCH / "module"
        configure = ["cmake", "-S", str(ROOT / "python"), "-B", str(build),
                     f"-DDDSTAGE_PACKAGE_VERSION={cmake_version()}", *common]
        # Captured: a libddstage not found is no error here, and its CMake error would read as one.
        proc = subprocess.run(configure, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0 and cached(build, "ddstage_DIR") == "ddstage_DIR-NOTFOUND":
            return None
        print(proc.stdout, end="", flush=True)
        if proc.returncode != 0:
            sys.exit(f"ddstage: configuring the module against the libddstage in {cached(build, 'ddstage_DIR')} "
                     "failed (see above); DDSTAGE_PIP_FROM_SOURCE=1 builds libcore instead")
        say(f"building the module against the installed libddstage {cached(build, 'DDSTAGE_PYTHON_LIBDDSTAGE')}")
        return build

    def configure_project(self, common):
        build = SCRATCH / "project"
        # Precompiled headers and unity batches, as scripts/build: a third of the CPU time of a
        # file-by-file build (cmake/ddstage_fast_build.cmake).
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DDDSTAGE_WITH_PYTHON=ON",
                        "-DDDSTAGE_BUILD_TESTS=OFF", "-DDDSTAGE_SHARED=OFF", "-DDDSTAGE_PCH=ON",
                        "-DDDSTAGE_UNITY=ON", *common], check=True)
        return build


setup(
    version=cmake_version(),
    ext_modules=[Extension("ddstage._ddstage", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(SCRATCH / "build")}, "egg_info": {"egg_base": str(SCRATCH)}},
)
