#!/usr/bin/env python3
"""Checks packaging/spack/package.py against the CMake files it builds, without Spack (which
these machines cannot install): the recipe is loaded with a stand-in for `spack.package`
that records its directives and gives cmake_args() a spec, then

- every DDSTAGE_* option or cache variable that selects a feature is set explicitly (-D) by
  cmake_args(), whatever the spec; those that select none (developer switches, install
  layout) are named in NOT_FEATURES with the reason;
- every -D that cmake_args() passes names a cache variable the project defines, or a hint of a
  package it finds (Python3_EXECUTABLE);
- every find_package / pkg_check_modules dependency has a depends_on (PACKAGE_OF maps CMake's
  names to Spack's), and every depends_on a CMake dependency;
- the spec's ~cuda ~rocm ~python give OFF for their ON/OFF/AUTO options (never AUTO), and
  +cuda +rocm +python give ON;
- the cmake depends_on allows no older CMake than cmake_minimum_required.

Everything is read from the source tree given, so a new option or dependency fails here until
the recipe (or NOT_FEATURES / PACKAGE_OF, with a reason) says what to do with it.

usage: check_spack_recipe.py SOURCE_DIR      exit 0 pass, 1 fail
"""
import importlib.util
import re
import sys
import types
from pathlib import Path

from checks import report, run

# CMake's dependency names -> Spack's packages. None: nothing to depend on.
PACKAGE_OF = {
    "MPI": "mpi",
    "HDF5": "hdf5",
    "libfabric": "libfabric",
    "CLI11": "cli11",
    "yaml-cpp": "yaml-cpp",
    "spdlog": "spdlog",
    "fmt": "fmt",
    "libxxhash": "xxhash",
    "Catch2": "catch2",
    "pybind11": "py-pybind11",
    "Python3": "python",
    "CUDAToolkit": "cuda",
    "hip": "hip",
    "ZLIB": "zlib-api",
    "libarchive": "libarchive",
    "PkgConfig": "pkgconfig",
    "Threads": None,  # the C library's pthreads
    "ddstage": None,  # the installed package, found by examples/ (a consumer, not the build)
}
# depends_on without a find_package behind it.
NOT_FOUND_BY_CMAKE = {
    "cmake": "runs the build",
    "py-numpy": "imported by the Python package at run time",
    "fmt": "fmt::fmt, which the Python module links, may come with spdlog's package",
}
# DDSTAGE_* cache variables that select no feature of the installed package.
NOT_FEATURES = {
    "DDSTAGE_SANITIZE": "a developer build (ASan + UBSan)",
    "DDSTAGE_FUZZ": "libFuzzer targets, developers only",
    "DDSTAGE_FUZZ_SECONDS": "how long ctest fuzzes",
    "DDSTAGE_PCH": "precompiled headers: build speed only",
    "DDSTAGE_UNITY": "unity build: build speed only",
    "DDSTAGE_UNITY_BATCH": "unity build's batch size: build speed only",
    "DDSTAGE_PYTHON_LIBDDSTAGE": "internal: which installed libddstage the module alone links (setup.py's word)",
    "DDSTAGE_INSTALL_CMAKEDIR": "install layout: the default suits a Spack prefix",
    "DDSTAGE_INSTALL_PYTHONDIR": "install layout: lib/pythonX.Y/site-packages under the prefix, as Spack's python",
}
# The build tree and consumer projects are not the build the recipe drives.
SKIP_DIRS = {".git", "examples", "out"}


def cmake_files(source):
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part in SKIP_DIRS or part.startswith("build") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.name == "CMakeLists.txt" or path.suffix == ".cmake"):
            yield path


def without_comments(text):
    return re.sub(r"#[^\n]*", "", text)


class CMakeProject:
    """What the project's CMake files define and find."""

    def __init__(self, source):
        self.options = {}  # DDSTAGE_* option or cache variable -> file
        self.cache_vars = set()  # every cache variable: set(CACHE), option(), find_program...
        self.found = {}  # dependency name -> file
        self.cmake_minimum = None
        for path in cmake_files(source):
            text = without_comments(path.read_text())
            rel = str(path.relative_to(source))
            for name in re.findall(r"\boption\(\s*(\w+)", text, re.I):
                self.cache_vars.add(name)
                if name.startswith("DDSTAGE_"):
                    self.options[name] = rel
            for name in re.findall(r"\bset\(\s*(\w+)\s[^)]*?\bCACHE\b", text, re.I):
                self.cache_vars.add(name)
                if name.startswith("DDSTAGE_"):
                    self.options[name] = rel
            self.cache_vars.update(re.findall(r"\bfind_(?:program|path|library|file)\(\s*(\w+)", text, re.I))
            for name in re.findall(r"\bfind_package\(\s*([\w.+-]+)", text, re.I):
                self.found.setdefault(name, rel)
            for args in re.findall(r"\bpkg_check_modules\(([^)]*)\)", text, re.I):
                for word in args.split()[1:]:  # the first is the variable prefix
                    if word.isupper():  # REQUIRED, QUIET, IMPORTED_TARGET, GLOBAL...
                        continue
                    self.found.setdefault(re.split(r"[<>=]", word)[0], rel)
            minimum = re.search(r"cmake_minimum_required\(\s*VERSION\s+([\d.]+)", text, re.I)
            if minimum and path.parent == source:
                self.cmake_minimum = minimum.group(1)


class Directives:
    """What the recipe declared, in the order Spack would see it."""

    def __init__(self):
        self.versions, self.variants, self.depends, self.extends, self.licenses = [], {}, [], [], []


def spack_stub(recorded):
    """A `spack.package` with the directives and base classes the recipe uses."""
    mod = types.ModuleType("spack.package")

    def version(name, **kwargs):
        recorded.versions.append((name, kwargs))

    def variant(name, default=None, description="", **kwargs):
        assert description, f"variant {name} has no description"
        recorded.variants[name] = default

    def depends_on(spec, when=None, type=("build", "link")):
        recorded.depends.append((spec, when, type))

    def extends(spec, when=None, **kwargs):
        recorded.extends.append((spec, when))

    def license(spdx, **kwargs):
        recorded.licenses.append(spdx)

    def conflicts(spec, when=None, msg=None):
        pass

    class FakeSpec:
        def __init__(self, values):
            self.variants = values

        def satisfies(self, constraint):
            for sign, name in re.findall(r"([+~])(\w+)", constraint):
                if name not in self.variants:
                    raise KeyError(f"spec.satisfies({constraint!r}): no variant {name!r} is declared")
                if self.variants[name] != (sign == "+"):
                    return False
            return True

        def __getitem__(self, name):
            dep = types.SimpleNamespace(prefix=f"/spack/{name}")
            dep.command = types.SimpleNamespace(path=f"/spack/{name}/bin/{name}3")
            return dep

    class CMakePackage:
        def __init__(self, spec, run_tests):
            self.spec, self.run_tests = spec, run_tests

        @staticmethod
        def define(name, value):
            # As Spack's: booleans become BOOL ON/OFF, anything else a STRING.
            if isinstance(value, bool):
                return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
            return f"-D{name}:STRING={value}"

        def define_from_variant(self, name, variant=None):
            variant = variant or name.lower()
            if variant not in self.spec.variants:
                raise KeyError(f"define_from_variant({name!r}, {variant!r}): no such variant")
            return self.define(name, self.spec.variants[variant])

    # Spack's mixins: the variant each adds (CudaPackage also the cuda dependency).
    class CudaPackage:
        variant("cuda", default=False, description="Build with CUDA")
        depends_on("cuda", when="+cuda")

    class ROCmPackage:
        variant("rocm", default=False, description="Enable ROCm support")

    for obj in (version, variant, depends_on, extends, license, conflicts, CMakePackage, CudaPackage,
                ROCmPackage):
        setattr(mod, obj.__name__, obj)
    mod.__all__ = [name for name in vars(mod) if not name.startswith("_")]
    mod.FakeSpec = FakeSpec
    return mod


def load_recipe(path):
    recorded = Directives()
    stub = spack_stub(recorded)
    sys.modules["spack"] = types.ModuleType("spack")
    sys.modules["spack.package"] = stub
    spec = importlib.util.spec_from_file_location("ddstage_spack_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Ddstage, recorded, stub.FakeSpec


def package_name(spec):
    return re.match(r"[a-z0-9-]+", spec).group(0)


def defines(args):
    """-DNAME:TYPE=VALUE -> {NAME: VALUE}"""
    out = {}
    for arg in args:
        match = re.fullmatch(r"-D(\w+)(?::\w+)?=(.*)", arg)
        assert match, f"not a -D argument: {arg!r}"
        out[match.group(1)] = match.group(2)
    return out


def main(source):
    source = Path(source).resolve()
    project = CMakeProject(source)
    recipe, recorded, FakeSpec = load_recipe(source / "packaging/spack/package.py")
    problems = []

    all_on = {name: True for name in recorded.variants}
    all_off = {name: False for name in recorded.variants}
    args_on = defines(recipe(FakeSpec(all_on), run_tests=True).cmake_args())
    args_off = defines(recipe(FakeSpec(all_off), run_tests=False).cmake_args())

    for name, where in sorted(project.options.items()):
        if name in NOT_FEATURES:
            continue
        for label, args in (("all variants on", args_on), ("all variants off", args_off)):
            if name not in args:
                problems.append(f"{name} ({where}) is not set by cmake_args() with {label}: give it a "
                                f"variant or a define, or name it in NOT_FEATURES with a reason")
    for name in sorted(set(NOT_FEATURES) - set(project.options)):
        problems.append(f"NOT_FEATURES names {name}, which no CMake file defines any more")

    hints = tuple(f"{dep}_" for dep in project.found)
    for name in sorted(set(args_on) | set(args_off)):
        if name not in project.cache_vars and not name.startswith(hints):
            problems.append(f"cmake_args() passes -D{name}, which no CMake file defines")

    for name, value in (("DDSTAGE_WITH_CUDA", "ON"), ("DDSTAGE_WITH_HIP", "ON"), ("DDSTAGE_WITH_PYTHON", "ON")):
        if args_on.get(name) != value:
            problems.append(f"+cuda +rocm +python gives {name}={args_on.get(name)}, not {value}")
        if args_off.get(name) != "OFF":
            problems.append(f"~cuda ~rocm ~python gives {name}={args_off.get(name)}, not OFF")
    if args_on.get("DDSTAGE_BUILD_TESTS") != "ON" or args_off.get("DDSTAGE_BUILD_TESTS") != "OFF":
        problems.append("DDSTAGE_BUILD_TESTS does not follow self.run_tests")
    if "Python3_EXECUTABLE" not in args_on or "Python3_EXECUTABLE" in args_off:
        problems.append("Python3_EXECUTABLE is not passed exactly when +python")

    depended = {package_name(spec) for spec, _, _ in recorded.depends}
    depended |= {package_name(spec) for spec, _ in recorded.extends}
    wanted = set()
    for dep, where in sorted(project.found.items()):
        if dep not in PACKAGE_OF:
            problems.append(f"{where} finds {dep}: add a depends_on to the recipe and {dep} to PACKAGE_OF")
            continue
        package = PACKAGE_OF[dep]
        if package is None:
            continue
        wanted.add(package)
        if package not in depended:
            problems.append(f"{where} finds {dep}, but the recipe has no depends_on('{package}')")
    for package in sorted(depended - wanted - set(NOT_FOUND_BY_CMAKE)):
        problems.append(f"the recipe depends on {package}, which no CMake file finds")

    cmake_dep = [spec for spec, _, _ in recorded.depends if package_name(spec) == "cmake"]
    if not cmake_dep or cmake_dep[0] != f"cmake@{project.cmake_minimum}:":
        problems.append(f"depends_on cmake is {cmake_dep}, cmake_minimum_required is {project.cmake_minimum}")
    if recorded.licenses != ["BSD-3-Clause"]:
        problems.append(f"license() is {recorded.licenses}, not BSD-3-Clause as LICENSE")

    print(f"recipe variants: {', '.join(sorted(recorded.variants))}")
    print(f"CMake feature options: {', '.join(sorted(set(project.options) - set(NOT_FEATURES)))}")
    print(f"CMake dependencies: {', '.join(sorted(project.found))}")
    print(f"cmake_args (all on): {' '.join(f'{k}={v}' for k, v in sorted(args_on.items()))}")
    return report(problems)


if __name__ == "__main__":
    run(main, __doc__)
