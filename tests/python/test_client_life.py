"""A long-lived ddstage.Client through the store's life, over shared memory and over libfabric
(tcp on loopback): a dataset replaced under open readers."""
import threading
import time

import numpy as np
import pytest

import ddstage
from conftest import ROWS, random_ids

READ_TIMEOUT_S = 3


def assert_replaced(error):
    text = str(error)
    assert "dataset 'rows' was replaced" in text and "reopen it" in text, text
    assert not isinstance(error, ddstage.UsageError), text


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
