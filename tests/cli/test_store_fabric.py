"""The served store over libfabric (serve --transport fabric, tcp on loopback): reads equal
origin in every progress mode, a hung rank times out, SIGTERM ends a read, and transport errors
are one clear line. Split from test_store.py so that ctest runs the two side by side."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import assert_runtime_error, assert_usage_error, random_spec, read_bytes, skip_if_sanitized
from test_store import FABRIC_ENV, READ_FABRIC, datasets, read_store, serve, status  # noqa: F401 (fixtures)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import STARTUPS, timed  # noqa: E402
from local_mpi import MPI_ENV  # noqa: E402


def other_modes_in_release(ddstage, progress):
    """The ASan build runs the default progress mode only: the modes differ in how a server's
    progress thread waits, not in the C++ a sanitizer checks, and spin keeps every rank's thread
    busy for the whole test, which under ASan took a core from the rest of the suite."""
    if progress != "adaptive":
        skip_if_sanitized(ddstage, f"fabric.progress={progress} runs in the Release build")


@pytest.mark.parametrize("progress", ["adaptive", "sleep", "spin"])
def test_fabric_store_reads_equal_origin(ddstage, serve, datasets, progress):
    """serve --transport fabric: every rank publishes an endpoint and each shard's key, and
    reads over libfabric (fixed and variable rows, unsorted, repeats) equal origin, however the
    ranks' progress threads wait (fabric.progress)."""
    other_modes_in_release(ddstage, progress)
    store = serve(3, args=["--transport", "fabric"], env={**FABRIC_ENV, "DDSTAGE_FABRIC_PROGRESS": progress})
    ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "rows")
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    d = yaml.safe_load((store.dir / "store.yaml").read_text())
    assert all(r["fabric_provider"] == "tcp;ofi_rxm" and r["fabric_address"] for r in d["ranks"])
    assert all(len(ds["regions"]) == 3 and all("fabric_key" in g and "fabric_base" in g for g in ds["regions"])
               for ds in d["datasets"])
    assert all("fabric" in r["transports"] for r in status(ddstage, store.dir)["ranks"])
    for seed in range(3):
        spec, _ = random_spec(500, seed, count=60)
        for field in ("x", "y"):
            got = ddstage.ok("read", "--store", store.dir, "--dataset", "rows", "--ids", spec, "--field", field,
                             "--verify", binary=True, env=READ_FABRIC).stdout
            assert got == read_bytes(ddstage, datasets["rows"], spec, field)
        spec, _ = random_spec(300, seed, count=60)
        got = ddstage.ok("read", "--store", store.dir, "--dataset", "f", "--ids", spec, "--verify", binary=True,
                         env=READ_FABRIC).stdout
        assert got == read_bytes(ddstage, datasets["files"], spec)
    # The same store still serves shared-memory readers.
    assert read_store(ddstage, store.dir, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
    store.stop()


@pytest.mark.parametrize("progress", ["adaptive", "sleep", "spin"])
def test_fabric_hung_rank_times_out(ddstage, serve, datasets, progress):
    """A server rank that stops answering (SIGSTOP) fails a fabric read within read_timeout
    (and a few times what the same read took before: a read opens its endpoint, and opens it
    again after a time-out), naming the rank, instead of hanging, in every fabric.progress
    mode; once it runs again the store stops cleanly."""
    other_modes_in_release(ddstage, progress)
    store = serve(2, args=["--transport", "fabric"], env={**FABRIC_ENV, "DDSTAGE_FABRIC_PROGRESS": progress})
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    owned = status(ddstage, store.dir)["datasets"][0]["samples_per_rank"]
    pids = store.pids()
    read_timeout_s = 1
    read = ["read", "--store", store.dir, "--dataset", "f", "--ids", f"0,{owned[0]}"]
    env = {**READ_FABRIC, "DDSTAGE_READ_TIMEOUT": f"{read_timeout_s}s"}
    _, read_s = timed(ddstage.ok, *read, binary=True, env=env)
    os.kill(pids[1], signal.SIGSTOP)
    try:
        proc, took = timed(ddstage.run, *read, env=env)
        assert took < read_timeout_s + STARTUPS * read_s, f"the read took {took:.1f} s, {read_s:.2f} s before"
        assert_runtime_error(proc, "rank 1")
    finally:
        os.kill(pids[1], signal.SIGCONT)
    store.stop()


def whole_read_seconds(ddstage, args, env, runs=3):
    """The slowest of a few whole `ddstage ARGS` runs, start to exit: what a time bound here is a
    multiple of, measured on this machine as loaded as it is now."""
    slowest = 0.0
    for _ in range(runs):
        t0 = time.monotonic()
        ddstage.ok(*args, binary=True, env=env)
        slowest = max(slowest, time.monotonic() - t0)
    return slowest


@pytest.mark.busy
def test_fabric_read_ends_by_sigterm(ddstage, serve, datasets, tmp_path):
    """A `ddstage read` over libfabric waiting on a hung rank dies by SIGTERM (143 in a shell),
    within twice a whole read's time. Debian's libfabric loads libinfinipath, whose SIGTERM
    handler exited 1 (or deadlocked in exit handlers); libcore puts the process's own back."""
    store = serve(2, args=["--transport", "fabric"], env=FABRIC_ENV)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    owned = status(ddstage, store.dir)["datasets"][0]["samples_per_rank"]
    args = ["read", "--store", store.dir, "--dataset", "f", "--ids", f"0,{owned[0]}"]
    baseline = whole_read_seconds(ddstage, args, READ_FABRIC)
    pids = store.pids()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        with open(tmp_path / "read.err", "w+") as err:
            proc = subprocess.Popen([ddstage.path, *map(str, args)], stdout=subprocess.DEVNULL, stderr=err,
                                    env={**os.environ, **READ_FABRIC, "DDSTAGE_READ_TIMEOUT": "1h"})
            try:
                deadline = time.monotonic() + 3 * baseline
                while "libfabric.so" not in Path(f"/proc/{proc.pid}/maps").read_text():
                    assert proc.poll() is None and time.monotonic() < deadline, "the read never loaded libfabric"
                    time.sleep(0.01)
                # A whole read's time after the load, it has long been waiting on rank 1.
                time.sleep(baseline)
                assert proc.poll() is None, "the read did not wait on the stopped rank"
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=2 * baseline)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"SIGTERM did not end the read within {2 * baseline:.2f} s (2 whole reads)")
                took = time.monotonic() - t0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
            err.seek(0)
            assert rc == -signal.SIGTERM, f"exited {rc} after {took:.2f} s:\n{err.read()}"
    finally:
        os.kill(pids[1], signal.SIGCONT)
    store.stop()


def test_fabric_transport_errors(ddstage, serve, datasets):
    """Reading over libfabric from a store that serves none, and a bad --transport, are usage
    errors that say what to do."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    assert "fabric_address" not in (store.dir / "store.yaml").read_text()
    proc = ddstage.run("read", "--store", store.dir, "--dataset", "f", "--ids", "0", env=READ_FABRIC)
    assert_usage_error(proc, "--transport fabric")
    store.stop()
    assert_usage_error(ddstage.run("serve", "--store", store.dir, "--transport", "rdma"), "transport")


def test_serve_fabric_unavailable_fails_every_rank_alike(ddstage, tmp_path):
    """serve --transport fabric where libfabric offers no provider: availability is asked after
    MPI_Init (which may set FI_* variables libfabric reads once) in the agreed start-up step,
    so every rank ends with the same line naming rank 0 and the probe's reason, exit 2."""
    env = {**MPI_ENV, "FI_PROVIDER": "no-such-provider"}
    proc = ddstage.run("serve", "--store", tmp_path / "store", "--listen", "127.0.0.1:0", "--transport", "fabric",
                       prefix=["timeout", "60", "mpiexec", "-n", "2"], env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("ddstage: error:")]
    assert len(errors) == 2 and errors[0] == errors[1], proc.stderr
    assert "rank 0 could not open its libfabric endpoint: serve --transport fabric: " in errors[0], errors[0]
