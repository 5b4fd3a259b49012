"""scripts/check-format on a scratch git work tree with the repository's .clang-format: quiet
and exit 0 when every tracked file is formatted, exit 1 naming the file and showing its diff
when one is not; untracked files are not its business."""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "check-format"

FORMATTED = "int add(int a, int b) {\n  return a + b;\n}\n"
UNFORMATTED = "int  sub( int a,int b ){return a-b;}\n"


@pytest.fixture
def tree(tmp_path):
    if shutil.which("clang-format-14") is None and shutil.which("clang-format") is None:
        pytest.skip("clang-format is not installed (scripts/install-deps installs it)")
    shutil.copy(REPO / ".clang-format", tmp_path / ".clang-format")
    (tmp_path / "add.cpp").write_text(FORMATTED)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    return tmp_path


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def check(tree):
    return subprocess.run([CHECK, tree], capture_output=True, text=True, timeout=120)


def test_formatted_tree_passes(tree):
    proc = check(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 files as clang-format 14 writes them" in proc.stdout


def test_unformatted_file_fails_with_its_name_and_diff(tree):
    (tree / "lib").mkdir()
    (tree / "lib" / "sub.hpp").write_text(UNFORMATTED)
    git(tree, "add", "lib/sub.hpp")
    proc = check(tree)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 of 2 files differ" in proc.stderr
    assert "  lib/sub.hpp" in proc.stderr and "add.cpp" not in proc.stderr
    assert "-" + UNFORMATTED.rstrip() in proc.stdout
    assert "+int sub(int a, int b) {" in proc.stdout and "+  return a - b;" in proc.stdout


def test_untracked_files_are_not_checked(tree):
    (tree / "scratch.cpp").write_text(UNFORMATTED)
    assert check(tree).returncode == 0
