"""`pip install --no-build-isolation .` as a Python user runs it: into a fresh venv (with the
system's site packages, for numpy and setuptools), no package index; then that venv's Python,
outside the source tree and with no PYTHONPATH, imports the installed ddstage and reads a batch
from a store served by the build's CLI, compared with numpy's view of the source array.

Both of setup.py's paths, one test each (ctest runs them apart, pytest -k):
- against_the_installed: the module alone against the libddstage in CMAKE_PREFIX_PATH (ctest:
  the prefix install.reader_app installs this build into), which the venv's module then loads;
- from_source: DDSTAGE_PIP_FROM_SOURCE=1, libcore built again and linked in statically.

ctest sets DDSTAGE_BIN and DDSTAGE_GEN. The store is started first, so that a CLI built
without MPI (which cannot serve) skips the test before the minutes of building."""
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(SOURCE / "tests"))
from local_mpi import MPI_ENV  # noqa: E402

BIN = os.environ.get("DDSTAGE_BIN", "ddstage")
GEN = os.environ.get("DDSTAGE_GEN", "ddstage-gen")
# The suite's CPU budget: build type None (Debian's: no optimisation flags), as this test proves
# the packaging, not the optimiser. Coming after setup.py's own -D, it also shows that CMAKE_ARGS
# has the last word.
MODULE_CMAKE_ARGS = "-DCMAKE_BUILD_TYPE=None"
# From source, only what this test needs (a client reading over shared memory) is built, without
# MPI, HDF5 or GPU runtimes (libfabric stays, as in a plain `pip install .`); in unity batches
# with precompiled headers, setup.py's own choice (the test checks it took it).
SOURCE_CMAKE_ARGS = ("-DDDSTAGE_WITH_MPI=OFF -DDDSTAGE_WITH_HDF5=OFF -DDDSTAGE_WITH_CUDA=OFF "
                     "-DDDSTAGE_WITH_HIP=OFF -DCMAKE_BUILD_TYPE=None")
# Under ctest's TIMEOUTs, so that pytest says which step hung. From source, the build runs niced
# beside other work (scripts/test), off the critical path: it gets the room to be slow. The module
# alone takes about a minute of CPU, but more than 240 s of wall time on 2 cores at load 13-15
# (measured in a suite run beside other builds): these are hang bounds, not speed checks.
MODULE_BUILD_TIMEOUT_S = 600
SOURCE_BUILD_TIMEOUT_S = 1500
READER = textwrap.dedent("""
    import sys
    import numpy as np
    import ddstage
    store, source = sys.argv[1:]
    print(ddstage.__file__)
    # The libddstage.so this process loaded, if any (a module built from source has none).
    with open("/proc/self/maps") as maps:
        print(next((line.split()[-1] for line in maps if "/libddstage.so" in line), "none"))
    ids = [7, 0, 299, 150, 7]
    got = ddstage.Client(store).open("rows").get_batch("v", ids)
    want = np.load(source, mmap_mode="r")[ids]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert np.array_equal(got, want), "the batch differs from the source rows"
    print("batch ok", got.shape)
""")


def run(*args, timeout=120, stderr=subprocess.PIPE, **kwargs):
    # In a session of its own: on a timeout, what it started goes too (pip's compilers would
    # outlive a SIGKILLed pip and go on taking the CPU from the tests after this one).
    with subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                          start_new_session=True, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{args} still ran after {timeout} s (killed, with what it started):\n"
                        f"{out[-20000:]}\n{err or ''}")
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{out}\n{err or ''}"
    return out


@pytest.fixture
def served(tmp_path):
    """A 1-rank store from the build's CLI with rows.npy flattened and loaded as 'rows'."""
    source = tmp_path / "v.npy"
    run(GEN, "npy", source, "--samples", 300, "--shape", "4,3", "--dtype", "float32")
    run(BIN, "flatten", source, "-o", tmp_path / "rows.ddx")
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    env = {**os.environ, **MPI_ENV}
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([BIN, "serve", "--store", store, "--listen", "127.0.0.1:0"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        ready = subprocess.run([BIN, "wait", "--store", store, "--timeout", "60s", "--pid", str(proc.pid)],
                               capture_output=True, text=True, env=env, timeout=90)
        if ready.returncode != 0 and "built without MPI" in log.read_text():
            pytest.skip(f"{BIN} was built without MPI: it cannot serve the store the module reads")
        assert ready.returncode == 0, f"serve not ready: {ready.stderr}\n{log.read_text()}"
        run(BIN, "load", "--store", store, tmp_path / "rows.ddx", "--name", "rows", env=env)
        yield store, source
        run(BIN, "stop", "--store", store, env=env)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def pip_install(tmp_path, timeout, **env_vars):
    """pip install -v of the source tree into a fresh venv, with env_vars set: the venv, and the
    environment and output of pip."""
    venv = tmp_path / "venv"
    # Within the step's own hang bound: niced beside a CPU hog, making a venv took over 120 s.
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True,
                          text=True, timeout=timeout)
    if made.returncode != 0:
        pytest.skip(f"python3 -m venv failed (Debian: apt-get install python3-venv): {made.stderr.strip()}")
    python = venv / "bin" / "python"
    backend = subprocess.run([python, "-c", "import setuptools, wheel"], capture_output=True, text=True)
    if backend.returncode != 0:
        pytest.skip(f"no build backend (Debian: python3-setuptools python3-wheel): {backend.stderr.strip()}")

    # The venv's Python is what pip runs, so the module must be built for it; TMPDIR keeps
    # setup.py's CMake build and pip's own scratch inside this test's directory.
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TMPDIR=str(tmp_path / "tmp"), PIP_DISABLE_PIP_VERSION_CHECK="1", **env_vars)
    # Nothing in the source tree, nor setuptools' build/lib.* in a CMake build/ there.
    watched = [p for p in (SOURCE, SOURCE / "python", SOURCE / "python" / "ddstage", SOURCE / "build") if p.is_dir()]
    before = {p: set(os.listdir(p)) for p in watched}
    # -v: pip passes on setup.py's output (on its stderr), which says which path it took and what
    # CMake compiled.
    out = run(python, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-index", "--no-cache-dir", SOURCE,
              cwd=tmp_path, env=env, timeout=timeout, stderr=subprocess.STDOUT)
    for path, names in before.items():
        assert set(os.listdir(path)) == names, f"pip left {set(os.listdir(path)) - names} in {path}"
    return venv, env, out


def read_batch(tmp_path, venv, env, served):
    """The venv's Python reads a batch from the store: the libddstage.so it loaded, or "none"."""
    reader = tmp_path / "read_batch.py"
    reader.write_text(READER)
    out = run(venv / "bin" / "python", reader, *served, cwd=tmp_path, env=env).splitlines()
    assert Path(out[0]).is_relative_to(venv), f"imported {out[0]}, not the venv's ddstage"
    assert out[-1] == "batch ok (5, 4, 3)"
    return out[1]


def runpath(venv):
    """The entries of the RUNPATH (or RPATH) of the module pip installed into venv."""
    modules = list(venv.glob("lib/python*/site-packages/ddstage/_ddstage*.so"))
    assert len(modules) == 1, f"not one module installed: {modules}"
    dynamic = run("readelf", "-d", modules[0])
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dynamic)
    return [entry for path in paths for entry in path.split(":")]


def test_pip_install_against_the_installed_libddstage(tmp_path, served):
    prefix = os.environ.get("CMAKE_PREFIX_PATH", "")
    assert Path(prefix).is_absolute(), (
        f"CMAKE_PREFIX_PATH is {prefix!r}, not the prefix of an installed ddstage (ctest sets the one "
        "install.reader_app installs into)")
    prefix = Path(prefix).resolve()
    venv, env, out = pip_install(tmp_path, MODULE_BUILD_TIMEOUT_S, CMAKE_ARGS=MODULE_CMAKE_ARGS)
    took = re.search(r"^\s*ddstage: building the module against the installed libddstage (\S+)$", out, re.M)
    assert took, f"setup.py did not take the path of an installed libddstage:\n{out}"
    assert Path(took[1]).resolve().is_relative_to(prefix), f"built against {took[1]}, not the one in {prefix}"
    # The module, and nothing of libcore, was compiled.
    assert "ddstage_python.dir" in out and "ddstage_core.dir" not in out, out
    # Its RUNPATH, with no LD_LIBRARY_PATH set by this test, finds the library it was built against,
    # and names no empty entry (the current directory), as a build tree's RUNPATH would.
    entries = runpath(venv)
    assert str(Path(took[1]).parent) in entries and "" not in entries, f"the module's RUNPATH is {entries}"
    loaded = read_batch(tmp_path, venv, env, served)
    assert Path(loaded).is_relative_to(prefix), f"the module loaded {loaded}, not the libddstage in {prefix}"


def test_pip_install_from_source(tmp_path, served):
    venv, env, out = pip_install(tmp_path, SOURCE_BUILD_TIMEOUT_S, CMAKE_ARGS=SOURCE_CMAKE_ARGS,
                                 DDSTAGE_PIP_FROM_SOURCE="1")
    assert re.search(r"^\s*ddstage: .*building libcore too", out, re.M), f"setup.py did not build libcore:\n{out}"
    assert "ddstage_core.dir/Unity" in out and "cmake_pch" in out, f"libcore not built in unity batches:\n{out}"
    assert "" not in runpath(venv), f"the module's RUNPATH is {runpath(venv)}"
    loaded = read_batch(tmp_path, venv, env, served)
    assert loaded == "none", f"a module with libcore linked in loaded {loaded} as well"
