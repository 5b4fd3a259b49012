"""Fixtures for end-to-end tests of the real ddstage binary.

ctest sets DDSTAGE_BIN and DDSTAGE_GEN to the built executables; every test runs them as
separate processes with a timeout, and compares bytes against an independent reader
(h5py, numpy, plain file reads).
"""
import os
import subprocess
from pathlib import Path

import pytest

TIMEOUT_S = 120


class Tool:
    def __init__(self, path):
        self.path = path

    def run(self, *args, check=False, input=None, env=None, **kw):
        """Runs the tool; returns CompletedProcess with text stdout/stderr unless binary=True."""
        binary = kw.pop("binary", False)
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run([self.path, *map(str, args)], capture_output=True, text=not binary,
                              input=input, timeout=TIMEOUT_S, env=full_env, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.path} {' '.join(map(str, args))} exited {proc.returncode}:\n"
                                 f"{proc.stderr}")
        return proc

    def ok(self, *args, **kw):
        return self.run(*args, check=True, **kw)


@pytest.fixture(scope="session")
def ddstage():
    return Tool(os.environ.get("DDSTAGE_BIN", "ddstage"))


@pytest.fixture(scope="session")
def gen():
    return Tool(os.environ.get("DDSTAGE_GEN", "ddstage-gen"))


def assert_usage_error(proc, *words):
    """A one-line 'ddstage: error:' message naming the problem, and exit code 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert_one_error_line(proc, *words)


def assert_runtime_error(proc, *words):
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert_one_error_line(proc, *words)


def assert_one_error_line(proc, *words):
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode()
    errors = [l for l in stderr.splitlines() if l.startswith("ddstage: error:")]
    assert len(errors) == 1, stderr
    assert "terminate called" not in stderr and "Traceback" not in stderr
    for w in words:
        assert w.lower() in errors[0].lower(), (w, errors[0])


def tree_snapshot(path: Path):
    """(relative path, size, bytes) of every file under path: to prove nothing changed."""
    out = []
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            out.append((str(p.relative_to(path)), p.read_bytes()))
    return out
