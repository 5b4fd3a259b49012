"""Fixtures for the Python package's tests: datasets made by ddstage-gen (and numpy) and
flattened by the real CLI, a real `ddstage serve` job of 2 ranks under mpiexec, and
reference values read with h5py and plain file reads, never through ddstage's readers.

ctest sets DDSTAGE_BIN, DDSTAGE_GEN, DDSTAGE_EXAMPLES and PYTHONPATH (the build tree's
package). Everything started here is stopped or killed by pid, with timeouts."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from local_mpi import MPI_ENV, pid_alive  # noqa: E402
import busy_tier  # noqa: E402


BIN = os.environ.get("DDSTAGE_BIN", "ddstage")
GEN = os.environ.get("DDSTAGE_GEN", "ddstage-gen")
TIMEOUT_S = 120
ROWS, GRAPHS, FILES, SEQ = 500, 120, 150, 500
# libfabric over tcp on loopback only, for servers and for clients (as settings).
FABRIC_ENV = {"DDSTAGE_FABRIC_PROVIDER": "tcp", "DDSTAGE_FABRIC_DOMAIN": "lo", "FI_TCP_IFACE": "lo"}
FABRIC_SETTINGS = {"fabric.provider": "tcp", "fabric.domain": "lo"}


def pytest_configure(config):
    busy_tier.configure(config)


def pytest_collection_modifyitems(items):
    busy_tier.skip_busy_cases(items)


def run(*args, env=None):
    proc = subprocess.run([str(a) for a in args], capture_output=True, timeout=TIMEOUT_S,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}"
    return proc.stdout


def mpiexec(ranks, *args, timeout=TIMEOUT_S, env=None):
    """Runs `mpiexec -n RANKS ARGS` to the end (bounded); returns CompletedProcess, text."""
    return subprocess.run(["mpiexec", "-n", str(ranks), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **MPI_ENV, **(env or {})})


class Data:
    """The test datasets' index directories and their origin values."""

    def __init__(self, root: Path):
        self.root = root
        run(GEN, "hdf5-rows", root / "rows.h5", "--samples", ROWS, "--shape", "768", "--dtype", "float32")
        run(BIN, "flatten", root / "rows.h5", "--field", "x=/features", "--field", "y=/labels", "-o", root / "rows.ddx")
        with h5py.File(root / "rows.h5") as f:
            self.x, self.y = f["features"][:], f["labels"][:]
        run(GEN, "hdf5-ragged", root / "graphs.h5", "--graphs", GRAPHS)
        run(BIN, "flatten", root / "graphs.h5", "--ragged", "x=/x:/x_ptr", "--field", "/y", "-o", root / "graphs.ddx")
        with h5py.File(root / "graphs.h5") as f:
            x, ptr = f["x"][:], f["x_ptr"][:]
            self.graph_x = [x[ptr[i]:ptr[i + 1]] for i in range(GRAPHS)]
            self.graph_y = f["y"][:]
        run(GEN, "files", root / "tree", "--samples", FILES, "--min-bytes", "1", "--max-bytes", "9000")
        run(BIN, "flatten", root / "tree", "-o", root / "files.ddx")
        self.files = [p.read_bytes() for p in sorted((root / "tree").rglob("*.bin"))]
        # Samples that say which they are: id[i] == i, v[i] == i + [0, .1, ..., .7].
        (root / "seq").mkdir()
        np.save(root / "seq" / "id.npy", np.arange(SEQ, dtype=np.int64))
        np.save(root / "seq" / "v.npy", np.arange(SEQ, dtype=np.float32)[:, None] + np.arange(8, dtype=np.float32) / 10)
        run(BIN, "flatten", root / "seq" / "id.npy", root / "seq" / "v.npy", "-o", root / "seq.ddx")
        self.ddx = {name: root / f"{name}.ddx" for name in ("rows", "graphs", "files", "seq")}


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    return Data(tmp_path_factory.mktemp("data"))


class ServedStore:
    """`mpiexec -n RANKS ddstage serve` in its own process group, with the datasets loaded."""

    def __init__(self, directory: Path, data: Data, ranks=2, transport="auto"):
        self.dir = directory
        self.log = open(f"{directory}.log", "w+")
        self.env = {**os.environ, **MPI_ENV, **(FABRIC_ENV if transport == "fabric" else {})}
        self.proc = subprocess.Popen(["mpiexec", "-n", str(ranks), BIN, "serve", "--store", str(directory),
                                      "--listen", "127.0.0.1:0", "--transport", transport],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        # wait, not a store.yaml: a dead store's leftover descriptor would pass for a live one.
        ready = subprocess.run([BIN, "wait", "--store", str(directory), "--timeout", "60s",
                                "--pid", str(self.proc.pid)], capture_output=True, text=True, env=self.env, timeout=90)
        assert ready.returncode == 0, f"serve not ready: {ready.stderr}{self.output()}"
        descriptor = yaml.safe_load((directory / "store.yaml").read_text())
        self.pids = [r["pid"] for r in descriptor["ranks"]]
        self.segment_prefix = "ddstage-" + descriptor["id"]
        for name, ddx in data.ddx.items():
            self.load(ddx, name)

    def load(self, ddx, name, *flags):
        run(BIN, "load", "--store", self.dir, ddx, "--name", name, *flags, env=self.env)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        run(BIN, "stop", "--store", self.dir)
        assert self.proc.wait(timeout=30) == 0, self.output()

    def close(self):
        """Stops the job if it runs (kills it if stop does not end it); checks nothing is left."""
        if self.proc.poll() is None:
            subprocess.run([BIN, "stop", "--store", str(self.dir)], capture_output=True, timeout=TIMEOUT_S)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(pid_alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(p) for p in self.pids), "server ranks left behind"
        assert not list(Path("/dev/shm").glob(self.segment_prefix + "-*")), "shared memory left behind"


@pytest.fixture(scope="module")
def store(data, tmp_path_factory):
    """One served store per test file, every dataset loaded under its short name."""
    s = ServedStore(tmp_path_factory.mktemp("served") / "store", data)
    yield s
    s.close()


@pytest.fixture
def fresh_store(data, tmp_path):
    """A store of this test's own, for tests that stop it."""
    s = ServedStore(tmp_path / "store", data)
    yield s
    s.close()


def served_over(transport, data, directory, monkeypatch):
    """A store served and read over transport: (store, client settings). shm: the default
    serve, read through shared memory; fabric: serve --transport fabric, read over tcp on
    loopback."""
    fabric = transport == "fabric"
    monkeypatch.setenv("FI_TCP_IFACE", "lo")  # the client's own endpoint, in this process
    s = ServedStore(directory, data, transport="fabric" if fabric else "auto")
    return s, {"transport": transport, **(FABRIC_SETTINGS if fabric else {})}


@pytest.fixture(params=["shm", "fabric"])
def fresh_store_by_transport(request, data, tmp_path, monkeypatch):
    """A store of this test's own for each transport: (store, client settings)."""
    s, settings = served_over(request.param, data, tmp_path / "store", monkeypatch)
    yield s, settings
    s.close()


@pytest.fixture
def fresh_fabric_store(data, tmp_path, monkeypatch):
    """A store of this test's own, served and read over libfabric: (store, client settings)."""
    s, settings = served_over("fabric", data, tmp_path / "store", monkeypatch)
    yield s, settings
    s.close()


@pytest.fixture(scope="session", autouse=True)
def no_user_settings(tmp_path_factory):
    """No DDSTAGE_* variable or config file of the person running the tests reaches a server."""
    for key in [k for k in os.environ if k.startswith("DDSTAGE_")]:
        if key not in ("DDSTAGE_BIN", "DDSTAGE_GEN", "DDSTAGE_EXAMPLES"):
            del os.environ[key]
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-empty"))


def random_ids(n, seed, count=64):
    """Unsorted ids over 0..n-1 with repeats, both ends included."""
    ids = np.random.default_rng(seed).integers(0, n, count)
    return np.concatenate([ids, ids[:3], [n - 1, 0]])


PYTHON = sys.executable
