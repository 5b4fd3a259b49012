#!/usr/bin/env python3
"""Checks the module file examples (packaging/modules/ddstage.lua and ddstage.tcl) against a real
install: installs the build into a scratch prefix with `cmake --install`, sets each file's
prefix, libdir and pythondir as its comments tell a site to (the prefix, and
CMAKE_INSTALL_LIBDIR / DDSTAGE_INSTALL_PYTHONDIR from the build's CMakeCache.txt), and checks
that both files prepend the same paths, and that each variable's path holds what it is
there for (the ddstage command, its man pages, the CMake package, ddstage.pc, the Python
package). A part the build did not make (no Python module, no ddstage.pc in this tree) is
reported as skipped, not passed.

usage: check_module_files.py BUILD_DIR SOURCE_DIR CMAKE      exit 0 pass, 1 fail
"""
import re
import subprocess
import tempfile
from pathlib import Path

from checks import report, run

# What each variable must find under the path the module prepends.
WANTED = {
    "PATH": "ddstage",
    "MANPATH": "man1/ddstage.1",
    "CMAKE_PREFIX_PATH": "*/cmake/ddstage/ddstageConfig.cmake",
    "PKG_CONFIG_PATH": "ddstage.pc",
    "PYTHONPATH": "ddstage/__init__.py",
}


def lua_paths(text, values):
    """{VAR: path} from prepend_path("VAR", prefix | pathJoin(...)) with the locals replaced."""
    local = {name: values.get(name, value) for name, value in re.findall(r'^local (\w+) = "([^"]*)"', text, re.M)}

    def evaluate(expr):
        expr = expr.strip()
        call = re.fullmatch(r"pathJoin\((.*)\)", expr)
        if call:
            return "/".join(evaluate(part) for part in call.group(1).split(","))
        if expr.startswith('"'):
            return expr.strip('"')
        return local[expr]

    return {var: evaluate(expr) for var, expr in re.findall(r'^prepend_path\("(\w+)",\s*(.*)\)\s*$', text, re.M)}


def tcl_paths(text, values):
    """{VAR: path} from prepend-path VAR $prefix/... with the set variables replaced."""
    var = {name: values.get(name, value) for name, value in re.findall(r"^set (\w+) (\S+)", text, re.M)}
    return {name: re.sub(r"\$(\w+)", lambda m: var[m.group(1)], path)
            for name, path in re.findall(r"^prepend-path (\w+) (\S+)", text, re.M)}


def cache_value(build, name):
    match = re.search(rf"^{name}:\w+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    return match.group(1) if match else None


def main(build, source, cmake):
    build, source = Path(build).resolve(), Path(source).resolve()
    problems, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="ddstage-module-check-") as scratch:
        prefix = Path(scratch) / "prefix"
        subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)], check=True,
                       stdout=subprocess.DEVNULL, timeout=300)
        values = {"prefix": str(prefix), "libdir": cache_value(build, "CMAKE_INSTALL_LIBDIR") or "lib",
                  "pythondir": cache_value(build, "DDSTAGE_INSTALL_PYTHONDIR")}
        lua = lua_paths((source / "packaging/modules/ddstage.lua").read_text(), values)
        tcl = tcl_paths((source / "packaging/modules/ddstage.tcl").read_text(), values)
        if lua != tcl:
            problems.append(f"ddstage.lua and ddstage.tcl differ:\n  lua {lua}\n  tcl {tcl}")
        for var in sorted(set(WANTED) - set(lua)):
            problems.append(f"ddstage.lua does not prepend {var}")
        for var in sorted(set(lua) - set(WANTED)):
            problems.append(f"ddstage.lua prepends {var}, which this check does not know what to look for in")
        for var, path in sorted(lua.items()):
            if var not in WANTED:
                continue
            if var == "PYTHONPATH" and values["pythondir"] is None:
                skipped.append("PYTHONPATH: this build has no Python module")
                continue
            if var == "PKG_CONFIG_PATH" and not (source / "cmake/ddstage.pc.in").exists():
                skipped.append("PKG_CONFIG_PATH: this tree installs no ddstage.pc (cmake/ddstage.pc.in)")
                continue
            found = list(Path(path).glob(WANTED[var]))
            print(f"{var}: {path} -> {[str(f.relative_to(prefix)) for f in found]}")
            if not found:
                problems.append(f"{var} prepends {path}, where the install has no {WANTED[var]}")
    return report(problems, skipped)


if __name__ == "__main__":
    run(main, __doc__)
