"""ddstage.open(DATASET.ddx): a dataset read straight from its origin files, with no store and
no server: rows equal h5py's and plain file reads, and byte for byte what a served store of the
same index returns; verify catches a flipped byte; a changed source is refused unless
origin.allow_stale; it pickles and goes to DataLoader workers of every start method."""
import os
import pickle
import shutil

import numpy as np
import pytest

import ddstage
from conftest import FILES, GRAPHS, ROWS, random_ids


def test_rows_equal_origin_and_the_store(data, store):
    client = ddstage.Client(store.dir)
    rows = ddstage.open(data.ddx["rows"])
    assert isinstance(rows, ddstage.Dataset) and (rows.name, rows.samples) == ("rows", ROWS)
    assert rows.fields["x"].dtype == np.float32 and rows.fields["x"].shape == (768,)
    served = client.open("rows")
    for seed in range(3):
        ids = random_ids(ROWS, seed)
        x = rows.get_batch("x", ids, verify=seed == 0)
        np.testing.assert_array_equal(x, data.x[ids])
        assert x.tobytes() == served.get_batch("x", ids).tobytes()
        np.testing.assert_array_equal(rows.get_batch("y", ids), data.y[ids])
    out = np.empty((3, 768), np.float32)
    assert rows.get_batch("x", [499, 0, 0], out=out) is out
    np.testing.assert_array_equal(out, data.x[[499, 0, 0]])
    assert rows.get_batch("x", []).shape == (0, 768)

    graphs = ddstage.open(data.ddx["graphs"])
    ids = random_ids(GRAPHS, 4)
    x, offsets = graphs.get_batch("x", ids)
    assert [r.tobytes() for r in ddstage.split_rows(x, offsets)] == [data.graph_x[i].tobytes() for i in ids]
    np.testing.assert_array_equal(graphs.row_sizes("x", ids), [data.graph_x[i].nbytes for i in ids])
    assert graphs.batch_bytes("x", ids) == sum(data.graph_x[i].nbytes for i in ids)
    served_x, served_offsets = client.open("graphs").get_batch("x", ids)
    assert x.tobytes() == served_x.tobytes() and np.array_equal(offsets, served_offsets)

    files = ddstage.open(data.ddx["files"])
    ids = random_ids(FILES, 5)
    data_bytes, offsets = files.get_batch(next(iter(files.fields)), ids, verify=True)
    assert [r.tobytes() for r in ddstage.split_rows(data_bytes, offsets)] == [data.files[i] for i in ids]


def test_input_errors_name_what_is_wrong(data, tmp_path):
    rows = ddstage.open(data.ddx["rows"])
    with pytest.raises(ddstage.UsageError, match="no field 'z'.*fields: x, y"):
        rows.get_batch("z", [1])
    with pytest.raises(ddstage.UsageError, match=f"sample id {ROWS} is out of range"):
        rows.get_batch("x", [0, ROWS])
    with pytest.raises(ddstage.UsageError, match="out holds"):
        rows.get_batch("x", [1, 2], out=np.empty((3, 768), np.float32))
    with pytest.raises(ddstage.UsageError, match="is not a ddstage index"):
        ddstage.open(tmp_path / "missing.ddx")
    with pytest.raises(ddstage.UsageError, match="unknown setting"):
        ddstage.open(data.ddx["rows"], settings={"no.such": "1"})


def copied_dataset(data, tmp_path):
    """The rows dataset flattened from a copy of its source this test may damage."""
    from conftest import BIN, run
    shutil.copy2(data.root / "rows.h5", tmp_path / "rows.h5")
    run(BIN, "flatten", tmp_path / "rows.h5", "--field", "x=/features", "-o", tmp_path / "rows.ddx")
    return tmp_path / "rows.h5", tmp_path / "rows.ddx"


def test_verify_finds_a_flipped_byte_and_a_changed_source_is_refused(data, tmp_path):
    source, ddx = copied_dataset(data, tmp_path)
    rows = ddstage.open(ddx)
    offset = source.stat().st_size // 2
    stat = source.stat()
    with open(source, "r+b") as f:  # bit rot: the same size and modification time
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    everything = range(ROWS)
    assert not np.array_equal(rows.get_batch("x", everything), data.x)  # read as it is, unchecked
    with pytest.raises(ddstage.ChecksumError, match="rows.h5"):
        rows.get_batch("x", everything, verify=True)

    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # edited since flattening
    with pytest.raises(ddstage.Error, match="rows.h5"):
        ddstage.open(ddx).get_batch("x", [0])
    stale = ddstage.open(ddx, settings={"origin.allow_stale": True})
    np.testing.assert_array_equal(stale.get_batch("x", [0]), data.x[[0]])


def test_it_pickles_and_reads_in_dataloader_workers_of_every_start_method(data):
    rows = ddstage.open(data.ddx["rows"], settings={"origin.allow_stale": False})
    again = pickle.loads(pickle.dumps(rows))
    assert repr(again) == repr(rows) and again.settings == {"origin.allow_stale": "false"}
    np.testing.assert_array_equal(again.get_batch("x", [7]), data.x[[7]])
    torch = pytest.importorskip("torch")
    ds = pytest.importorskip("ddstage.torch").Dataset(rows)
    np.testing.assert_array_equal(ds[3]["x"].numpy(), data.x[3])  # the parent reads before forking
    ids = np.random.default_rng(0).permutation(ROWS).tolist()
    for context in ("fork", "spawn"):
        dl = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2, multiprocessing_context=context,
                                         timeout=60, sampler=ids)
        batches = list(dl)
        assert len(batches) == -(-ROWS // 64)
        for i, batch in enumerate(batches):
            chunk = ids[i * 64:(i + 1) * 64]
            np.testing.assert_array_equal(batch["x"].numpy(), data.x[chunk])
            np.testing.assert_array_equal(batch["y"].numpy(), data.y[chunk])
