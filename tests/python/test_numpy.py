"""ddstage from Python against a served store (2 ranks): numpy batches equal the origin
values for fixed and variable fields, unsorted ids with repeats; out=; readers per thread;
errors are Python exceptions carrying libcore's message."""
import shutil
import threading

import numpy as np
import pytest
import yaml

import ddstage
from conftest import BIN, FILES, GRAPHS, ROWS, random_ids, run


@pytest.fixture(scope="module")
def client(store):
    return ddstage.Client(store.dir)


def test_fixed_rows_equal_origin(client, data):
    rows = client.open("rows")
    assert (rows.name, rows.samples, len(rows)) == ("rows", ROWS, ROWS)
    assert rows.fields["x"].dtype == np.float32 and rows.fields["x"].shape == (768,)
    assert rows.fields["x"].row_bytes == 3072 and not rows.fields["x"].variable
    for seed in range(3):
        ids = random_ids(ROWS, seed)
        x = rows.get_batch("x", ids)
        assert x.dtype == np.float32 and x.shape == (len(ids), 768) and x.flags.c_contiguous
        np.testing.assert_array_equal(x, data.x[ids])
        np.testing.assert_array_equal(rows.get_batch("y", ids, verify=True), data.y[ids])
    # Any sequence of integers: a list, a range, a narrower dtype.
    for ids in ([499, 0, 7, 7], range(10, 20), np.array([3, 1, 2], dtype=np.int32), np.array([5], np.uint16)):
        np.testing.assert_array_equal(rows.get_batch("x", ids), data.x[np.asarray(ids)])
    assert rows.get_batch("x", []).shape == (0, 768)


def test_out_receives_the_rows(client, data):
    rows = client.open("rows")
    ids = random_ids(ROWS, 7, count=10)
    out = np.empty((len(ids), 768), np.float32)
    assert rows.get_batch("x", ids, out=out) is out
    np.testing.assert_array_equal(out, data.x[ids])
    raw = np.empty(len(ids) * 3072, np.uint8)  # any dtype, when the bytes add up
    rows.get_batch("x", ids, out=raw)
    assert raw.tobytes() == data.x[ids].tobytes()
    bad = [(np.empty((len(ids) + 1, 768), np.float32), "out holds"),
           (np.empty((len(ids), 2 * 768), np.float32)[:, ::2], "C-contiguous"),
           (np.zeros((len(ids), 768), np.float32).view(), "writable"),
           ([0.0] * len(ids) * 768, "numpy array")]
    bad[2][0].flags.writeable = False
    for arr, words in bad:
        with pytest.raises(ddstage.UsageError, match=words):
            rows.get_batch("x", ids, out=arr)


def test_out_too_small_is_refused_before_a_byte_is_written(client):
    """A destination one row short, inside a larger buffer: UsageError, and not one byte of
    the buffer past it (or in it) changed."""
    rows = client.open("rows")
    backing = np.full(4 * 768, 7.0, np.float32)
    with pytest.raises(ddstage.UsageError, match="out holds 6144 bytes"):
        rows.get_batch("x", [3, 9, 1], out=backing[:2 * 768])
    assert (backing == 7.0).all()


@pytest.mark.parametrize("name,edit", [("shape6", {"shape": [6]}), ("rowbytes16", {"row_bytes": 16}),
                                       ("both", {"shape": [4], "row_bytes": 16}), ("reshaped", {"shape": [2, 4]}),
                                       ("float64", {"dtype": "float64"})])
def test_manifest_edited_after_load_is_refused(store, data, tmp_path, name, edit):
    """Issue 13's heap overflow: a loaded dataset's manifest.yaml edited (shape [8] -> [6],
    row_bytes 32 -> 16, ...) so that an array sized by the shape would be filled by the
    store's rows. Opening it is a ddstage.Error naming manifest.yaml; nothing is read."""
    copy = tmp_path / "seq.ddx"
    shutil.copytree(data.ddx["seq"], copy)
    run(BIN, "load", "--store", store.dir, copy, "--name", name)
    client = ddstage.Client(store.dir)
    np.testing.assert_array_equal(client.open(name).get_batch("v", [3])[0], 3 + np.arange(8, dtype=np.float32) / 10)
    manifest = yaml.safe_load((copy / "manifest.yaml").read_text())
    v = next(f for f in manifest["fields"] if f["name"] == "v")
    v.update(edit)
    (copy / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    with pytest.raises(ddstage.Error, match="manifest.yaml") as e:
        client.open(name)
    assert not isinstance(e.value, ddstage.UsageError)


def test_variable_rows_equal_origin(client, data):
    graphs = client.open("graphs")
    x = graphs.field("x")
    assert x.variable and x.dtype == np.float32 and x.shape == (4,) and x.row_bytes == 0
    ids = random_ids(GRAPHS, 3)
    values, offsets = graphs.get_batch("x", ids, verify=True)
    assert values.dtype == np.float32 and values.shape == (offsets[-1], 4) and offsets.dtype == np.int64
    assert len(offsets) == len(ids) + 1 and offsets[0] == 0
    for row, i in zip(ddstage.split_rows(values, offsets), ids):
        np.testing.assert_array_equal(row, data.graph_x[i])
    np.testing.assert_array_equal(graphs.row_sizes("x", ids), np.diff(offsets) * 16)
    assert graphs.batch_bytes("x", ids) == values.nbytes
    np.testing.assert_array_equal(graphs.get_batch("y", ids), data.graph_y[ids])

    files = client.open("files")
    ids = random_ids(FILES, 4)
    values, offsets = files.get_batch("data" if "data" in files.fields else next(iter(files.fields)), ids)
    assert values.dtype == np.uint8
    assert [r.tobytes() for r in ddstage.split_rows(values, offsets)] == [data.files[i] for i in ids]


def test_readers_per_thread(client, data):
    """Threads share one Dataset (a reader each, made on first use) or take their own."""
    rows = client.open("rows")
    failures = []

    def work(seed, own):
        reader = rows.reader() if own else rows
        for k in range(20):
            ids = random_ids(ROWS, seed * 100 + k, count=32)
            if not np.array_equal(reader.get_batch("x", ids), data.x[ids]):
                failures.append((seed, k))

    threads = [threading.Thread(target=work, args=(s, s % 2 == 0)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures and not any(t.is_alive() for t in threads)


def test_input_errors_are_usage_errors(client, store, tmp_path):
    rows = client.open("rows")
    cases = [(lambda: ddstage.Client(tmp_path), str(tmp_path)),
             (lambda: client.open("nope"), "nope"),
             (lambda: rows.get_batch("z", [0]), "z"),
             (lambda: rows.field("z"), "fields: x, y"),
             (lambda: rows.get_batch("x", [0, ROWS]), "out of range"),
             (lambda: rows.row_sizes("x", [ROWS + 5]), "out of range"),
             (lambda: rows.get_batch("x", [3, -1]), "negative"),
             (lambda: rows.get_batch("x", [1.5]), "integers"),
             (lambda: rows.get_batch("x", [[1, 2]]), "one-dimensional"),
             (lambda: rows.get_batch("x", 3), "one-dimensional"),
             # Settings reach libcore: a bad one, and transport fabric on a store serving none.
             (lambda: ddstage.Client(store.dir, {"nope": 1}), "nope"),
             (lambda: ddstage.Client(store.dir, {"transport": "rdma"}), "rdma"),
             (lambda: ddstage.Client(store.dir, {"transport": "fabric"}).open("rows"), "--transport fabric")]
    for call, words in cases:
        with pytest.raises(ddstage.UsageError, match=words) as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, ddstage.Error)
        assert isinstance(e.value, RuntimeError)


def test_store_stopped_is_a_runtime_error(fresh_store, data):
    rows = ddstage.Client(fresh_store.dir).open("rows")
    np.testing.assert_array_equal(rows.get_batch("x", [1, 400]), data.x[[1, 400]])
    fresh_store.stop()
    with pytest.raises(ddstage.Error, match="rank") as e:
        rows.get_batch("x", [1, 400])
    assert not isinstance(e.value, ddstage.UsageError)
    with pytest.raises(ddstage.UsageError):
        ddstage.Client(fresh_store.dir)


def test_profile_counts_batches_while_on(client):
    rows = client.open("rows")
    ddstage.profile_reset()
    rows.get_batch("x", [1, 2, 3])
    assert ddstage.profile_snapshot()["batches"] == 0
    ddstage.profile_enable()
    try:
        for _ in range(4):
            rows.get_batch("x", [5, 9, 200, 201])
    finally:
        ddstage.profile_enable(False)
    snap = ddstage.profile_snapshot()
    assert (snap["batches"], snap["rows"], snap["bytes"]) == (4, 16, 16 * 3072)
    assert snap["paths"] == {"shm": 4}
    copy = snap["stages"]["copy"]
    assert copy["batches"] == 4 and 0 <= copy["p50_us"] <= copy["p99_us"] <= copy["max_us"]
    assert "4 batches" in ddstage.profile_report()
    ddstage.profile_reset()
