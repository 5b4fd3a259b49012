"""`pip install --no-build-isolation .` as a Python user runs it: into a fresh venv (with the
system's site packages, for numpy and setuptools), no package index; then that venv's Python,
outside the source tree and with no PYTHONPATH, imports the installed ddstage and reads a batch
from a store served by the build's CLI, compared with numpy's view of the source array.

ctest sets DDSTAGE_BIN and DDSTAGE_GEN. The store is started first, so that a CLI built
without MPI (which cannot serve) skips the test before the minutes of building."""
import os
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
# The suite's CPU budget: only what this test needs (a client reading over shared memory) is
# built, in the fewest translation units, without MPI, HDF5 or GPU runtimes (libfabric stays, as
# in a plain `pip install .`). Build type None (Debian's: no optimisation flags) and precompiled
# standard headers take the build from ~210 s of CPU in Release to about half of that: this test
# proves the packaging, not the optimiser. Coming after setup.py's own -D, they also show that
# CMAKE_ARGS has the last word.
CMAKE_ARGS = ("-DDDSTAGE_WITH_MPI=OFF -DDDSTAGE_WITH_HDF5=OFF -DDDSTAGE_WITH_CUDA=OFF -DDDSTAGE_WITH_HIP=OFF "
              "-DCMAKE_BUILD_TYPE=None -DDDSTAGE_PCH=ON")
BUILD_TIMEOUT_S = 600  # under ctest's TIMEOUT, so that pytest says which step hung
READER = textwrap.dedent("""
    import sys
    import numpy as np
    import ddstage
    store, source = sys.argv[1:]
    print(ddstage.__file__)
    ids = [7, 0, 299, 150, 7]
    got = ddstage.Client(store).open("rows").get_batch("v", ids)
    want = np.load(source, mmap_mode="r")[ids]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert np.array_equal(got, want), "the batch differs from the source rows"
    print("batch ok", got.shape)
""")


def run(*args, timeout=120, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


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


def test_pip_install_into_a_venv_reads_a_batch(tmp_path, served):
    store, source = served
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True,
                          text=True, timeout=120)
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
    env.update(CMAKE_ARGS=CMAKE_ARGS, TMPDIR=str(tmp_path / "tmp"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    # Nothing in the source tree, nor setuptools' build/lib.* in a CMake build/ there.
    watched = [p for p in (SOURCE, SOURCE / "python", SOURCE / "python" / "ddstage", SOURCE / "build") if p.is_dir()]
    before = {p: set(os.listdir(p)) for p in watched}
    run(python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir", SOURCE,
        cwd=tmp_path, env=env, timeout=BUILD_TIMEOUT_S)
    for path, names in before.items():
        assert set(os.listdir(path)) == names, f"pip left {set(os.listdir(path)) - names} in {path}"

    reader = tmp_path / "read_batch.py"
    reader.write_text(READER)
    out = run(python, reader, store, source, cwd=tmp_path, env=env).splitlines()
    assert Path(out[0]).is_relative_to(venv), f"imported {out[0]}, not the venv's ddstage"
    assert out[-1] == "batch ok (5, 4, 3)"
