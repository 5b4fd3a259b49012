"""The compiled half of `pip install .`: CMake builds the module ddstage._ddstage for the Python
that runs pip, and setuptools packs it with python/ddstage/ (metadata: pyproject.toml).

libcore is linked into the module statically (-DDDSTAGE_SHARED=OFF), so the wheel carries
everything ddstage itself needs and does not depend on a libddstage.so installed somewhere
else. CMAKE_ARGS (the variable scikit-build and conda-build read) is appended to CMake's
arguments, so a site can turn features off: CMAKE_ARGS="-DDDSTAGE_WITH_MPI=OFF".
CMake builds in a temporary directory, and setuptools' own build/ and .egg-info go there too,
so nothing lands in the source tree (nor in a CMake build/ directory there)."""
import atexit
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

ROOT = Path(__file__).resolve().parent
SCRATCH = Path(tempfile.mkdtemp(prefix="ddstage-pip-"))
atexit.register(shutil.rmtree, SCRATCH, True)


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(\s*ddstage\s+VERSION\s+([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = SCRATCH / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DDDSTAGE_WITH_PYTHON=ON",
            "-DDDSTAGE_BUILD_TESTS=OFF",
            "-DDDSTAGE_SHARED=OFF",
            *shlex.split(os.environ.get("CMAKE_ARGS", "")),
        ]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "ddstage_python", "--parallel", jobs],
                       check=True)
        built = list((build / "python" / "ddstage").glob("_ddstage*.so"))
        if len(built) != 1:
            sys.exit(f"ddstage: expected one _ddstage*.so from CMake, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    version=cmake_version(),
    ext_modules=[Extension("ddstage._ddstage", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(SCRATCH / "build")}, "egg_info": {"egg_base": str(SCRATCH)}},
)
