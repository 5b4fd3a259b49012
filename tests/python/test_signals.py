"""Signals reach a Python reader over libfabric as they would without it. Debian's libfabric
loads libinfinipath, whose constructor installs handlers for SIGINT, SIGTERM and the crash
signals; its SIGTERM handler called exit(), which deadlocked a DataLoader worker in its exit
handlers and kept a Slurm job running. libcore puts back what the process had: the default, or
Python's own handlers. Every time bound is a multiple of a whole reader process's run, measured
here as loaded as the machine is now."""
import os
import select
import signal
import subprocess
import time

import pytest

from conftest import PYTHON, ServedStore

# The reader, in a process of its own: a batch of every rank's rows (libfabric is loaded and an
# endpoint open), "ready", then by mode: exit (once); on a line from stdin, the same batch again
# (blocked); or sleep with Python's own SIGINT and SIGTERM handlers in place (handlers).
READER = r"""
import signal, sys, time
import numpy as np
import ddstage

store, mode = sys.argv[1:3]
if mode == "handlers":
    def on_sigterm(sig, frame):
        print("python's SIGTERM handler", flush=True)
        sys.exit(42)
    signal.signal(signal.SIGTERM, on_sigterm)
client = ddstage.Client(store, {"transport": "fabric", "fabric.provider": "tcp", "fabric.domain": "lo",
                                "read_timeout": "1h"})
rows = client.open("rows")
reader = rows.reader()
ids = np.arange(rows.samples)
reader.get_batch("x", ids)
print("ready", flush=True)
if mode == "blocked":
    sys.stdin.readline()
    reader.get_batch("x", ids)
    print("the batch returned", flush=True)
elif mode == "handlers":
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    while True:
        time.sleep(0.05)
"""
READER_ENV = {**os.environ, "FI_TCP_IFACE": "lo"}


@pytest.fixture(scope="module")
def fabric_store(data, tmp_path_factory):
    s = ServedStore(tmp_path_factory.mktemp("served") / "store", data, transport="fabric")
    yield s
    s.close()


def start_reader(store, mode, tmp_path):
    err = open(tmp_path / f"reader-{mode}.err", "w+")
    proc = subprocess.Popen([PYTHON, "-c", READER, str(store.dir), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, bufsize=0, env=READER_ENV)
    proc.err = err
    return proc


def stderr_of(proc):
    proc.err.seek(0)
    return proc.err.read()


def wait_line(proc, text, timeout):
    """Reads the reader's stdout until the line `text`, for at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} from the reader within {timeout:.2f} s:\n{stderr_of(proc)}"
        if select.select([proc.stdout], [], [], left)[0]:
            line = proc.stdout.readline()
            assert line, f"the reader ended ({proc.wait()}) before {text!r}:\n{stderr_of(proc)}"
            if line.decode().strip() == text:
                return


def end(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    proc.err.close()


@pytest.fixture(scope="module")
def baseline(fabric_store, tmp_path_factory):
    """The slowest of two whole reader runs (start, import, libfabric, one batch, exit)."""
    slowest = 0.0
    for _ in range(2):
        t0 = time.monotonic()
        proc = start_reader(fabric_store, "once", tmp_path_factory.mktemp("baseline"))
        try:
            assert proc.wait(timeout=120) == 0, stderr_of(proc)
        finally:
            end(proc)
        slowest = max(slowest, time.monotonic() - t0)
    return slowest


@pytest.mark.busy
def test_reader_waiting_on_a_hung_rank_dies_by_sigterm(fabric_store, baseline, tmp_path):
    """A reader blocked in get_batch on a SIGSTOPped rank ends by SIGTERM (returncode -15),
    within twice a whole reader run."""
    proc = start_reader(fabric_store, "blocked", tmp_path)
    try:
        wait_line(proc, "ready", 3 * baseline)
        os.kill(fabric_store.pids[1], signal.SIGSTOP)
        try:
            proc.stdin.write(b"go\n")
            time.sleep(baseline)  # a whole run's time: long since waiting on rank 1
            assert proc.poll() is None, f"the batch did not wait on the stopped rank:\n{stderr_of(proc)}"
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=2 * baseline)
            except subprocess.TimeoutExpired:
                pytest.fail(f"SIGTERM did not end the reader within {2 * baseline:.2f} s (2 whole runs)")
        finally:
            os.kill(fabric_store.pids[1], signal.SIGCONT)
        assert rc == -signal.SIGTERM, f"exited {rc}:\n{stderr_of(proc)}"
    finally:
        end(proc)


@pytest.mark.busy
def test_python_handlers_survive_libfabric(fabric_store, baseline, tmp_path):
    """After reading over libfabric, SIGINT still raises KeyboardInterrupt and SIGTERM still runs
    the handler the program installed before it opened the store."""
    proc = start_reader(fabric_store, "handlers", tmp_path)
    try:
        wait_line(proc, "ready", 3 * baseline)
        proc.send_signal(signal.SIGINT)
        wait_line(proc, "KeyboardInterrupt", 2 * baseline)
        proc.send_signal(signal.SIGTERM)
        wait_line(proc, "python's SIGTERM handler", 2 * baseline)
        assert proc.wait(timeout=2 * baseline) == 42, stderr_of(proc)
    finally:
        end(proc)
