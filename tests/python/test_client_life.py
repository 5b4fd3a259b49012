"""A long-lived ddstage.Client through the store's life, over shared memory and over libfabric
(tcp on loopback): a dataset replaced under open readers, a server rank that hangs, and the
store found from DDSTAGE_STORE. Deadlines are read_timeout plus a multiple of a normal batch
the same test timed first (deadlines.py): they hold with every core busy (pytest -m busy)."""
import os
import resource
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ddstage
from conftest import ROWS, TIMEOUT_S, random_ids

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import wait_until  # noqa: E402

READ_TIMEOUT_S = 3
# A failed batch ends within read_timeout and this many times what opening a reader and reading
# its first batch took before the fault: it may have been that far along when its rank went,
# and after a time-out the reader opens its fabric endpoint again.
OPENINGS = 3


def open_and_read(rows, ids):
    """A new reader and its first batch (opening its endpoint, connecting to every rank): the
    reader, the batch and the seconds that took."""
    t0 = time.monotonic()
    reader = rows.reader()
    batch = reader.get_batch("x", ids)
    return reader, batch, time.monotonic() - t0


def cpu_seconds():
    """User and system CPU of this process, every thread (libfabric's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def assert_replaced(error):
    text = str(error)
    assert "dataset 'rows' was replaced" in text and "reopen it" in text, text
    assert not isinstance(error, ddstage.UsageError), text


@pytest.mark.busy
def test_reader_outliving_replaces_fails_only_saying_so(fresh_store_by_transport, data):
    """A reader thread reads batches without pause while `load --replace` runs 6 times: every
    batch returns the origin's rows or raises ddstage.Error naming the dataset and 'replaced',
    never anything else (over libfabric: a broken connection or refused key); once a batch
    said so, every later one does; the dataset opened again reads the new load."""
    store, settings = fresh_store_by_transport
    client = ddstage.Client(store.dir, {**settings, "read_timeout": f"{READ_TIMEOUT_S}s"})
    rows = client.open("rows")
    ids = random_ids(ROWS, 11)
    np.testing.assert_array_equal(rows.get_batch("x", ids), data.x[ids])
    outcomes, done = [], threading.Event()

    def read_loop():
        reader = rows.reader()
        while not done.is_set():
            try:
                right = np.array_equal(reader.get_batch("x", ids), data.x[ids])
                outcomes.append(("rows", right))
            except ddstage.Error as e:
                outcomes.append(("error", e))

    thread = threading.Thread(target=read_loop)
    thread.start()
    try:
        for _ in range(6):
            store.load(data.ddx["rows"], "rows", "--replace")
            time.sleep(0.1)
    finally:
        done.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the reader hung"
    kinds = [kind for kind, _ in outcomes]
    assert "error" in kinds, "no batch noticed the replace"
    assert "rows" not in kinds[kinds.index("error"):], "a batch read a replaced dataset"
    for kind, what in outcomes:
        if kind == "rows":
            assert what, "a batch returned wrong rows"
        else:
            assert_replaced(what)
    with pytest.raises(ddstage.Error) as e:
        rows.get_batch("x", ids)
    assert_replaced(e.value)
    np.testing.assert_array_equal(client.open("rows").get_batch("x", ids), data.x[ids])


@pytest.mark.busy
def test_reader_waiting_on_a_hung_rank_sleeps(fresh_fabric_store, data):
    """With rank 1 SIGSTOPped, a fabric batch needing its rows fails after about read_timeout
    naming the rank and its host, for a reader that already read from it and for a new one
    that never connected, and spends well under a third of that wait on the CPU (it used to
    spin: ~60%). The wait is the time-out, not a speed: beyond it, a few times what opening a
    reader and its first batch took before the fault."""
    store, settings = fresh_fabric_store
    client = ddstage.Client(store.dir, {**settings, "read_timeout": f"{READ_TIMEOUT_S}s"})
    rows = client.open("rows")
    ids = np.arange(ROWS)  # every rank's rows
    warm, first, opening_s = open_and_read(rows, ids)
    np.testing.assert_array_equal(first, data.x)
    os.kill(store.pids[1], signal.SIGSTOP)
    try:
        for reader in (warm, rows.reader()):
            cpu0, t0 = cpu_seconds(), time.monotonic()
            with pytest.raises(ddstage.Error) as e:
                reader.get_batch("x", ids)
            wall, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
            assert f"rank 1 on {socket.gethostname()}" in str(e.value) and "read_timeout" in str(e.value), e.value
            assert READ_TIMEOUT_S * 0.9 <= wall < READ_TIMEOUT_S + OPENINGS * opening_s, \
                f"{wall:.2f} s against read_timeout {READ_TIMEOUT_S} s, opening a reader {opening_s:.2f} s"
            assert cpu < 0.3 * wall, f"{cpu:.2f} s of CPU in a {wall:.2f} s wait"
    finally:
        os.kill(store.pids[1], signal.SIGCONT)
    np.testing.assert_array_equal(warm.get_batch("x", ids), data.x)


def test_client_without_a_store_takes_DDSTAGE_STORE(store, data, monkeypatch):
    """Client() with no directory uses the `store` setting (DDSTAGE_STORE, as job scripts
    export it); with neither, a UsageError says how to name one."""
    monkeypatch.setenv("DDSTAGE_STORE", str(store.dir))
    ids = random_ids(ROWS, 3)
    np.testing.assert_array_equal(ddstage.Client().open("rows").get_batch("x", ids), data.x[ids])
    monkeypatch.setenv("DDSTAGE_STORE", str(store.dir / "elsewhere"))
    assert ddstage.Client(store.dir).open("rows").samples == ROWS  # the argument wins
    monkeypatch.delenv("DDSTAGE_STORE")
    assert ddstage.Client(settings={"store": str(store.dir)}).open("rows").samples == ROWS
    with pytest.raises(ddstage.UsageError, match="DDSTAGE_STORE"):
        ddstage.Client()


@pytest.mark.busy
def test_reader_of_a_killed_rank_fails_at_once_naming_it(fresh_fabric_store, data):
    """SIGKILL rank 1 while a reader thread reads every rank's rows over libfabric (it has read
    a whole batch, so it is connected to every rank): the first batch that fails names rank 1
    and fails within read_timeout and a few times what opening that reader took before the
    kill. (A broken connection used to wait up to read_timeout more for store.yaml to explain
    it, until MPI took the job down and the batch said only that the store had stopped.)"""
    store, settings = fresh_fabric_store
    client = ddstage.Client(store.dir, {**settings, "read_timeout": f"{READ_TIMEOUT_S}s"})
    rows = client.open("rows")
    ids = np.arange(ROWS)  # every rank's rows
    normal, failure, done = [], [], threading.Event()

    def read_until_a_failure():
        reader, batch, opening_s = open_and_read(rows, ids)
        assert np.array_equal(batch, data.x)
        normal.append(opening_s)
        while not done.is_set():
            t0 = time.monotonic()
            try:
                assert np.array_equal(reader.get_batch("x", ids), data.x)
                normal.append(time.monotonic() - t0)
            except ddstage.Error as e:
                failure.append((time.monotonic() - t0, str(e)))
                return

    thread = threading.Thread(target=read_until_a_failure)
    thread.start()
    try:
        wait_until(lambda: normal or failure or not thread.is_alive(), TIMEOUT_S, "the reader never read")
        assert normal and not failure, f"the reader did not read before rank 1 was killed: {failure}"
        opening_s = normal[0]
        os.kill(store.pids[1], signal.SIGKILL)
        thread.join(timeout=TIMEOUT_S)
    finally:
        done.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the reader hung"
    assert failure, "no batch failed after rank 1 was killed"
    wall, text = failure[0]
    assert wall < READ_TIMEOUT_S + OPENINGS * opening_s, \
        f"the failed batch took {wall:.2f} s (read_timeout {READ_TIMEOUT_S} s, opening a reader {opening_s:.2f} s): {text}"
    assert f"rank 1 on {socket.gethostname()}" in text or "rank 1 (pid" in text, text
