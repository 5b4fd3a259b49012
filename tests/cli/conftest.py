"""Fixtures for end-to-end tests of the real ddstage binary.

ctest sets DDSTAGE_BIN and DDSTAGE_GEN to the built executables; every test runs them as
separate processes with a timeout, and compares bytes against an independent reader
(h5py, numpy, plain file reads).
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
import busy_tier  # noqa: E402


TIMEOUT_S = 120

# Run by hand, DDSTAGE_BIN=build/cli/ddstage is relative: every test that changes directory
# (external raw files resolve against the cwd) or hands the path to a child would lose it.
for _key in ("DDSTAGE_BIN", "DDSTAGE_GEN"):
    if "/" in os.environ.get(_key, ""):
        os.environ[_key] = os.path.abspath(os.environ[_key])

# What runs a command as an unprivileged user (root ignores file modes).
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


# The ASan pass (scripts/test) runs a file's cases that reach C++ its other cases and the fuzz
# targets do not; a case marked release_pass runs in the Release pass only, and the ASan pass,
# where ctest sets DDSTAGE_SANITIZED_PASS=1, skips it visibly. `pytest` by hand runs everything.
RELEASE_PASS_HELP = ("release_pass: runs in the Release pass only: under the sanitizers it would check C++ that "
                     "the file's other cases or the fuzz targets already do, at several times the CPU")


def pytest_configure(config):
    busy_tier.configure(config)
    config.addinivalue_line("markers", RELEASE_PASS_HELP)


def pytest_collection_modifyitems(items):
    busy_tier.skip_busy_cases(items)
    if os.environ.get("DDSTAGE_SANITIZED_PASS") == "1":
        skip = pytest.mark.skip(reason="runs in the Release pass only (marked release_pass)")
        for item in items:
            if item.get_closest_marker("release_pass"):
                item.add_marker(skip)


class Tool:
    def __init__(self, path):
        self.path = path

    def run(self, *args, check=False, input=None, env=None, **kw):
        """Runs the tool; returns CompletedProcess with text stdout/stderr unless binary=True.

        prefix=[...] runs it under another command (e.g. NOBODY)."""
        binary = kw.pop("binary", False)
        prefix = list(kw.pop("prefix", ()))
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run([*prefix, self.path, *map(str, args)], capture_output=True, text=not binary,
                              input=input, timeout=TIMEOUT_S, env=full_env, **kw)
        if check and proc.returncode != 0:
            stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
            raise AssertionError(f"{self.path} {' '.join(map(str, args))} exited {proc.returncode}:\n"
                                 f"{stderr}")
        return proc

    def ok(self, *args, **kw):
        return self.run(*args, check=True, **kw)


@pytest.fixture(scope="session")
def ddstage():
    return Tool(os.environ.get("DDSTAGE_BIN", "ddstage"))


@pytest.fixture(scope="session")
def gen():
    return Tool(os.environ.get("DDSTAGE_GEN", "ddstage-gen"))


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch, tmp_path_factory):
    """No DDSTAGE_* variable or user config file of the person running the tests leaks in."""
    for key in list(os.environ):
        if key.startswith("DDSTAGE_") and key not in ("DDSTAGE_BIN", "DDSTAGE_GEN"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-empty")))
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home-empty")))


@pytest.fixture
def world_dir():
    """A world-writable directory whose parents are all traversable, for runs as uid 65534
    (pytest's tmp_path lives under a 0700 directory)."""
    d = Path(tempfile.mkdtemp(prefix="ddstage-cli-", dir="/tmp"))
    d.chmod(0o777)
    yield d
    for p in [d, *d.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o777 if p.is_dir() else 0o666)
    shutil.rmtree(d)


def skip_if_sanitized(tool, why="address-space limits do not work under sanitizers"):
    """ASan/UBSan builds reserve terabytes of address space and replace the allocator: an
    RLIMIT_AS test, or one that needs a huge allocation to throw bad_alloc, cannot run."""
    exe = shutil.which(tool.path) or tool.path
    data = Path(exe).read_bytes()
    if b"__asan_init" in data or b"__ubsan_handle" in data:
        pytest.skip(why)


def python_package_dir():
    """The build tree's importable ddstage package dir (next to the CLI's), or a visible skip
    (the module is not built with sanitizers)."""
    build = Path(os.environ.get("DDSTAGE_BIN", "")).resolve().parents[1]
    if not list((build / "python" / "ddstage").glob("_ddstage*.so")):
        pytest.skip(f"the Python module is not built in {build}/python (target ddstage_python)")
    return build / "python"


def require_setpriv():
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: cannot drop root privileges to test unreadable files")


# ---- errors ---------------------------------------------------------------------------------

def assert_usage_error(proc, *words):
    """A one-line 'ddstage: error:' message naming the problem, and exit code 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert_one_error_line(proc, *words)


def assert_runtime_error(proc, *words):
    """A one-line 'ddstage: error:' message naming the problem, and exit code 1."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert_one_error_line(proc, *words)


def assert_one_error_line(proc, *words):
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    errors = [l for l in stderr.splitlines() if l.startswith("ddstage: error:")]
    assert len(errors) == 1, stderr
    assert "terminate called" not in stderr and "Traceback" not in stderr
    for w in words:
        assert w.lower() in errors[0].lower(), (w, errors[0])


def tree_snapshot(path: Path):
    """(relative path, bytes) of every file under path: to prove nothing changed."""
    out = []
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            out.append((str(p.relative_to(path)), p.read_bytes()))
    return out


def temp_dirs_beside(out: Path):
    """Temporary index directories ('.NAME.ddx.tmp-*') that flatten left next to out."""
    out = Path(out)
    return sorted(p.name for p in out.parent.glob(f".{out.name}.tmp-*"))


# ---- flatten / read / info ------------------------------------------------------------------

def flatten(ddstage, out, *args, **kw):
    """Runs `ddstage flatten ARGS -o OUT` and insists it succeeds; returns OUT as a Path."""
    ddstage.ok("flatten", *args, "-o", out, **kw)
    assert (Path(out) / "manifest.yaml").is_file() and (Path(out) / "index.bin").is_file()
    return Path(out)


def read_bytes(ddstage, ddx, ids, field=None, **kw):
    """`ddstage read DDX --ids IDS [--field F]` to stdout; returns the bytes."""
    args = ["read", ddx, "--ids", ids] + (["--field", field] if field else [])
    return ddstage.ok(*args, binary=True, **kw).stdout


def read_bytes_to_file(ddstage, ddx, ids, out, field=None, **kw):
    """The same through -o FILE; checks no FILE.partial is left; returns FILE's bytes."""
    args = ["read", ddx, "--ids", ids, "-o", out] + (["--field", field] if field else [])
    proc = ddstage.ok(*args, binary=True, **kw)
    assert proc.stdout == b"", "read -o must not write samples to stdout"
    assert partials_beside(out) == []
    return Path(out).read_bytes()


def partials_beside(out):
    """Temporary files ('NAME.partial-PID[-N]') that an output left next to out."""
    out = Path(out)
    return sorted(p.name for p in out.parent.glob(f"{out.name}.partial*"))


def info_json(ddstage, ddx, *extra, **kw):
    return json.loads(ddstage.ok("info", ddx, "--json", *extra, **kw).stdout)


def pack_files(ddx):
    return sorted(p.name for p in Path(ddx).glob("pack-*.bin"))


# ---- ids and reference bytes ----------------------------------------------------------------

def expand_ids(spec):
    """The ids a --ids SPEC names, as the contract defines them (independent of ddstage)."""
    ids = []
    for item in spec.split(","):
        if "-" in item:
            lo, hi = item.split("-")
            ids.extend(range(int(lo), int(hi) + 1))
        else:
            ids.append(int(item))
    return ids


def random_spec(n, seed, count=12):
    """An unsorted --ids SPEC over 0..n-1 with repeats and inclusive ranges, and its ids."""
    rng = np.random.default_rng(seed)
    items = [str(i) for i in rng.integers(0, n, count)]
    for _ in range(3):
        lo = int(rng.integers(0, n))
        hi = min(n - 1, lo + int(rng.integers(0, 5)))
        items.insert(int(rng.integers(0, len(items) + 1)), f"{lo}-{hi}")
    items += [items[0], items[0], f"{n - 1}", "0"]  # explicit repeats and both ends
    spec = ",".join(items)
    return spec, expand_ids(spec)


def le_bytes(arr):
    """The bytes ddstage must return for arr: C order, little-endian."""
    arr = np.asarray(arr)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not np.little_endian):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes()


def rows_bytes(arr, ids):
    """Rows ids of arr, concatenated: what `read --ids` returns for a rows field."""
    return le_bytes(np.asarray(arr)[np.asarray(ids, dtype=np.int64)])


def keep_mtime_flip(path, offset):
    """Flips every bit of the byte at offset, keeping the file's size and mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size


def world_readable(path):
    for p in [Path(path), *Path(path).rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH |
                ((stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) if p.is_dir() else 0))
