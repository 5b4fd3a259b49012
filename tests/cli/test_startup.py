"""libfabric is loaded on first use (issue 19): commands that never read over fabric, and
`import ddstage`, never load it (Debian's pulls in libpsm2/libinfinipath, whose constructors
idle ~0.2 s in every process); what asks for fabric loads it, and where it cannot be loaded the
fabric transport is unavailable with one line naming libfabric.so.1 while everything else works.
The dynamic loader itself says what it loaded (LD_DEBUG=files)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TIMEOUT_S, assert_usage_error, flatten, python_package_dir, read_bytes

from test_store import serve  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from local_mpi import MPI_ENV  # noqa: E402

LIBFABRIC = "libfabric.so"


def loaded_libraries(proc):
    """The loader's 'file=...' lines of an LD_DEBUG=files run: the objects it opened."""
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    lines = [l for l in stderr.splitlines() if "file=" in l]
    # A run whose loader said nothing proves nothing: it must at least name the C library.
    assert any("libc.so" in l for l in lines), stderr[-2000:]
    return "\n".join(lines)


def traced(env=None):
    return {"LD_DEBUG": "files", **(env or {})}


@pytest.fixture(scope="module")
def small_index(ddstage, gen, tmp_path_factory):
    d = tmp_path_factory.mktemp("startup")
    gen.ok("files", d / "tree", "--samples", "20", "--min-bytes", "1", "--max-bytes", "3000")
    return flatten(ddstage, d / "files.ddx", d / "tree")


@pytest.fixture(scope="module")
def fabric_built(ddstage):
    """A visible skip in a build without libfabric (test_info covers what that build says)."""
    if "libfabric=0" in ddstage.ok("info", "--settings").stdout:
        pytest.skip("this ddstage was built without libfabric")


def test_help_flatten_and_local_read_do_not_load_libfabric(ddstage, gen, small_index, tmp_path):
    assert LIBFABRIC not in loaded_libraries(ddstage.ok("--help", env=traced()))
    gen.ok("files", tmp_path / "tree", "--samples", "5")
    proc = ddstage.ok("flatten", tmp_path / "tree", "-o", tmp_path / "t.ddx", env=traced())
    assert LIBFABRIC not in loaded_libraries(proc)
    proc = ddstage.ok("read", small_index, "--ids", "0-9", "-o", tmp_path / "out", env=traced())
    assert LIBFABRIC not in loaded_libraries(proc)
    assert (tmp_path / "out").read_bytes() == read_bytes(ddstage, small_index, "0-9")


def test_import_ddstage_does_not_load_libfabric_or_numpy():
    """numpy's import alone takes ~0.1 s here: pybind11 imports it at the first batch instead."""
    pythonpath = python_package_dir()
    proc = subprocess.run([sys.executable, "-c", "import sys, ddstage; print('numpy' in sys.modules)"],
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(pythonpath), "LD_DEBUG": "files"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    libraries = loaded_libraries(proc)
    assert "_ddstage" in libraries  # the compiled module itself was loaded
    assert LIBFABRIC not in libraries
    assert proc.stdout.strip() == "False", proc.stdout


def test_served_store_on_one_node_does_not_load_libfabric(ddstage, serve, small_index, tmp_path):
    """serve with the default transports on one node opens no endpoint, and its readers use
    shared memory: neither process loads libfabric (Debian's OpenMPI keeps its own ofi
    components closed, /etc/openmpi/openmpi-mca-params.conf)."""
    store = serve(None, env={"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(tmp_path / "ld")})
    ddstage.ok("load", "--store", store.dir, small_index, "--name", "f")
    proc = ddstage.ok("read", "--store", store.dir, "--dataset", "f", "--ids", "0-19", binary=True, env=traced())
    assert LIBFABRIC not in loaded_libraries(proc)
    assert proc.stdout == read_bytes(ddstage, small_index, "0-19")
    store.stop()
    traces = [p.read_text() for p in tmp_path.glob("ld.*")]
    assert any("libc.so" in t for t in traces), "the server's loader wrote no trace"
    assert not any(LIBFABRIC in t for t in traces)


def test_info_fabric_loads_libfabric_and_lists_providers(ddstage, fabric_built):
    proc = ddstage.ok("info", "--fabric", "--json", env=traced({"FI_TCP_IFACE": "lo"}))
    assert "file=libfabric.so.1" in loaded_libraries(proc)
    info = json.loads(proc.stdout)
    assert info["transport_available"] and any(p["chosen"] for p in info["providers"]), info


# A libfabric.so.1 that cannot serve: not a library at all, or a library without libfabric's
# functions (a copy of libxxhash, which ddstage links anyway).
BROKEN = ["empty", "garbage", "no fi_getinfo"]


@pytest.fixture(params=BROKEN)
def broken_libfabric(request, ddstage, fabric_built, tmp_path):
    """LD_LIBRARY_PATH putting a broken libfabric.so.1 first, and what dlopen says of it."""
    lib = tmp_path / "broken-lib" / "libfabric.so.1"
    lib.parent.mkdir()
    if request.param == "empty":
        lib.write_bytes(b"")
    elif request.param == "garbage":
        lib.write_bytes(b"this is not a shared library\n" * 100)
    else:
        ldd = subprocess.run(["ldd", ddstage.path], capture_output=True, text=True, check=True).stdout
        xxhash = [l.split("=>")[1].split()[0] for l in ldd.splitlines() if "libxxhash" in l]
        if not xxhash:
            pytest.skip("ddstage links no shared libxxhash to stand in for libfabric")
        lib.write_bytes(Path(xxhash[0]).read_bytes())
    return {"LD_LIBRARY_PATH": str(lib.parent)}


def test_info_fabric_without_a_usable_libfabric_is_one_line(ddstage, broken_libfabric):
    proc = ddstage.run("info", "--fabric", env=broken_libfabric)
    assert_usage_error(proc, "libfabric.so.1")


def test_transports_report_libfabric_unavailable(ddstage, broken_libfabric):
    """info --settings lists the fabric transport as unavailable, with the loader's reason."""
    out = ddstage.ok("info", "--settings", env=broken_libfabric).stdout
    fabric = [l for l in out.splitlines() if l.split()[:1] == ["fabric"]]
    assert len(fabric) == 1 and "unavailable" in fabric[0], out
    assert "libfabric.so.1" in fabric[0], fabric[0]
    shm = [l for l in out.splitlines() if l.split()[:2] == ["shm", "available"]]
    assert shm, out


def test_serve_over_fabric_without_a_usable_libfabric_fails_cleanly(ddstage, broken_libfabric, tmp_path):
    """A one-rank serve (no mpiexec) asked for fabric: exit 2, one line, no descriptor."""
    store = tmp_path / "store"
    proc = ddstage.run("serve", "--store", store, "--listen", "127.0.0.1:0", "--transport", "fabric",
                       env={**MPI_ENV, **broken_libfabric}, prefix=["timeout", "60"])
    assert_usage_error(proc, "libfabric.so.1", "--transport fabric")
    assert not (store / "store.yaml").exists()


def test_local_read_and_flatten_work_without_a_usable_libfabric(ddstage, gen, small_index, broken_libfabric,
                                                                tmp_path):
    assert read_bytes(ddstage, small_index, "0-19", env=broken_libfabric) == read_bytes(ddstage, small_index, "0-19")
    gen.ok("files", tmp_path / "tree", "--samples", "5")
    flatten(ddstage, tmp_path / "t.ddx", tmp_path / "tree", env=broken_libfabric)
