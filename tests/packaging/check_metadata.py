#!/usr/bin/env python3
"""Checks that what the project says about itself agrees: the version of project(VERSION) in
CMakeLists.txt is the one of CITATION.cff, CHANGELOG.md (a section for it) and the module
file examples (pyproject.toml reads it from CMakeLists.txt: it must not state one of its own),
and LICENSE's BSD-3-Clause is the licence CITATION.cff, pyproject.toml and the Spack recipe
name. CITATION.cff must parse as YAML with what CFF 1.2.0 requires.

usage: check_metadata.py SOURCE_DIR      exit 0 pass, 1 fail
"""
import re
import tomllib
from pathlib import Path

import yaml
from checks import report, run

SPDX = "BSD-3-Clause"


def main(source):
    source = Path(source).resolve()
    problems = []
    version = re.search(r"project\(\s*ddstage\s+VERSION\s+([0-9.]+)", (source / "CMakeLists.txt").read_text()).group(1)
    print(f"project(VERSION) {version}")

    if not (source / "LICENSE").read_text().startswith("BSD 3-Clause License\n"):
        problems.append("LICENSE is not the BSD 3-Clause License")

    citation = yaml.safe_load((source / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors", "version", "license", "abstract"):
        if not citation.get(key):
            problems.append(f"CITATION.cff has no {key}")
    if citation.get("cff-version") != "1.2.0":
        problems.append(f"CITATION.cff cff-version is {citation.get('cff-version')}, not 1.2.0")
    if str(citation.get("version")) != version:
        problems.append(f"CITATION.cff version {citation.get('version')} is not project(VERSION) {version}")
    if citation.get("license") != SPDX:
        problems.append(f"CITATION.cff license {citation.get('license')} is not {SPDX}")

    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    if "version" in project or "version" not in project.get("dynamic", []):
        problems.append("pyproject.toml states a version instead of taking project(VERSION) (dynamic)")
    if project.get("license") != {"text": SPDX}:
        problems.append(f"pyproject.toml license {project.get('license')} is not {SPDX}")

    if f'license("{SPDX}")' not in (source / "packaging/spack/package.py").read_text():
        problems.append(f"the Spack recipe does not declare license(\"{SPDX}\")")

    if not re.search(rf"^## \[{re.escape(version)}\]", (source / "CHANGELOG.md").read_text(), re.M):
        problems.append(f"CHANGELOG.md has no section ## [{version}]")

    for module in ("ddstage.lua", "ddstage.tcl"):
        text = (source / "packaging/modules" / module).read_text()
        stated = set(re.findall(r"(?<![\d.])\d+\.\d+\.\d+(?![\d.])", text))
        if stated != {version}:
            problems.append(f"packaging/modules/{module} names versions {sorted(stated)}, not {version}")

    return report(problems)


if __name__ == "__main__":
    run(main, __doc__)
