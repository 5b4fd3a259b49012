"""ddstage.torch.StoreDataset under torch's DataLoader with real worker processes: fork, spawn
and forkserver, over shared memory and over libfabric (tcp on loopback), every batch byte
identical to the origin read with h5py, including a parent that read before its workers were
forked and reads again after; whole batches per call (__getitems__) that the default
collate_fn passes through; the union of DistributedSampler's ranks is every sample."""
import multiprocessing
import os
import pickle
import threading
import weakref

import numpy as np
import pytest

import ddstage
from conftest import FABRIC_SETTINGS, GRAPHS, ROWS, SEQ, ServedStore

torch = pytest.importorskip("torch")
from ddstage.torch import Samples, StoreDataset  # noqa: E402  (needs torch)

BATCH = 64
WORKERS = [(0, None), (2, "fork"), (2, "spawn"), (2, "forkserver")]


@pytest.fixture(scope="module")
def fabric_store(data, tmp_path_factory):
    """A store served over libfabric, read over tcp on loopback (FI_TCP_IFACE reaches the
    workers through the environment they inherit or are spawned with)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FI_TCP_IFACE", "lo")
        s = ServedStore(tmp_path_factory.mktemp("served-fabric") / "store", data, transport="fabric")
        try:
            yield s
        finally:
            s.close()


@pytest.fixture(params=["shm", "fabric"])
def served(request, store, fabric_store):
    """(store, client settings) for each transport."""
    if request.param == "fabric":
        return fabric_store, {"transport": "fabric", **FABRIC_SETTINGS}
    return store, {"transport": "shm"}


def loader(ds, workers, context, **kw):
    return torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers,
                                       multiprocessing_context=context, timeout=60 if workers else 0, **kw)


def order(n, seed=0):
    return np.random.default_rng(seed).permutation(n).tolist()


def assert_rows(batch, ids, data):
    assert set(batch) == {"x", "y"} and batch["x"].shape == (len(ids), 768)
    np.testing.assert_array_equal(batch["x"].numpy(), data.x[ids])
    np.testing.assert_array_equal(batch["y"].numpy(), data.y[ids])


@pytest.mark.parametrize("workers,context", WORKERS, ids=["inline", "fork", "spawn", "forkserver"])
def test_workers_read_every_row_as_the_origin(served, data, workers, context):
    store, settings = served
    ds = StoreDataset(store.dir, "rows", settings=settings)
    first = list(range(BATCH))
    # The parent reads first: its reader (and fabric endpoint) exists when the workers fork.
    assert_rows(ds.__getitems__(first).batch, first, data)
    ids = order(ROWS)
    got = list(loader(ds, workers, context, sampler=ids))
    assert len(got) == -(-ROWS // BATCH)
    for i, batch in enumerate(got):
        assert type(batch) is dict  # the batch as read, not re-collated sample by sample
        assert_rows(batch, ids[i * BATCH:(i + 1) * BATCH], data)
    assert_rows(ds.__getitems__(first).batch, first, data)


def test_a_dataset_open_before_fork_reads_in_forked_workers(fabric_store, data):
    """The issue's failure: ddstage.torch.Dataset of a dataset the parent opened and read over
    libfabric, then forked workers: each reads through a reader of its own, and so does the
    parent afterwards."""
    rows = ddstage.Client(fabric_store.dir, {"transport": "fabric", **FABRIC_SETTINGS}).open("rows")
    ds = ddstage.torch.Dataset(rows)
    np.testing.assert_array_equal(ds[3]["x"].numpy(), data.x[3])
    ids = order(ROWS, seed=1)
    for i, batch in enumerate(loader(ds, 2, "fork", sampler=ids)):
        assert_rows(batch, ids[i * BATCH:(i + 1) * BATCH], data)
    np.testing.assert_array_equal(rows.get_batch("x", ids[:9]), data.x[ids[:9]])


def test_a_forked_child_keeps_the_readers_of_other_threads(fabric_store, data):
    """CPython clears the other threads' thread-locals in a forked child, before any after-fork
    hook: a reader that a thread of the parent holds there is kept, never destroyed (its
    destructor would close an endpoint the parent still uses), and the thread's next read in the
    parent goes through it."""
    rows = ddstage.Client(fabric_store.dir, {"transport": "fabric", **FABRIC_SETTINGS}).open("rows")
    read, forked, done, held = threading.Event(), threading.Event(), threading.Event(), []

    def thread():
        held.append(weakref.ref(rows._reader()))
        held.append(rows.get_batch("x", [1, 2]))
        read.set()
        forked.wait(60)
        held.append(rows.get_batch("x", [3, 4]))
        done.set()

    threading.Thread(target=thread, daemon=True).start()
    assert read.wait(60)
    child = multiprocessing.get_context("fork").Process(target=lambda: os._exit(0 if held[0]() else 1))
    child.start()
    child.join(60)
    forked.set()
    assert done.wait(60) and child.exitcode == 0
    np.testing.assert_array_equal(held[1], data.x[1:3])
    np.testing.assert_array_equal(held[2], data.x[3:5])


def test_variable_rows_come_as_values_and_offsets(store, data):
    ds = StoreDataset(store.dir, "graphs", fields=["x", "y"])
    ids = order(GRAPHS, seed=2)
    got_x, got_y = [], []
    for batch in loader(ds, 2, "fork", sampler=ids):
        values, offsets = batch["x"]
        assert offsets.dtype == torch.int64 and len(offsets) == len(batch["y"]) + 1
        got_x += [r.numpy() for r in ddstage.split_rows(values, offsets)]
        got_y.append(batch["y"].numpy())
    for i, rows in zip(ids, got_x):
        np.testing.assert_array_equal(rows, data.graph_x[i])
    np.testing.assert_array_equal(np.concatenate(got_y), data.graph_y[ids])
    # One sample: its own row, as ds[i] gives it.
    np.testing.assert_array_equal(ds[ids[0]]["x"].numpy(), data.graph_x[ids[0]])


def test_distributed_sampler_ranks_cover_every_sample(store):
    ds = StoreDataset(store.dir, "seq", fields=["id", "v"])
    seen = []
    for rank in range(2):
        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        ids = [b["id"] for b in loader(ds, 2, "fork", sampler=sampler)]
        assert sum(len(b) for b in ids) == len(sampler) == SEQ // 2
        assert np.array_equal(torch.cat(ids).numpy(), list(sampler))
        seen.extend(torch.cat(ids).tolist())
    assert sorted(seen) == list(range(SEQ))


def test_pinned_persistent_workers_over_epochs(fabric_store, data):
    """pin_memory pins the batch's tensors where CUDA is present (torch skips it elsewhere);
    persistent spawn workers keep their Client from one epoch to the next."""
    ds = StoreDataset(fabric_store.dir, "rows", settings={"transport": "fabric", **FABRIC_SETTINGS})
    dl = loader(ds, 2, "spawn", pin_memory=True, persistent_workers=True, sampler=list(range(ROWS)))
    for _ in range(2):
        batches = list(dl)
        assert len(batches) == -(-ROWS // BATCH)
        for i, batch in enumerate(batches):
            assert batch["x"].is_pinned() == torch.cuda.is_available()
            assert_rows(batch, list(range(i * BATCH, min(ROWS, (i + 1) * BATCH))), data)


def test_samples_and_collate(store, data):
    """__getitems__ reads the batch once; a collate_fn of one's own sees its samples, each as
    dataset[i] gives it; default_collate passes the batch through."""
    ds = StoreDataset(store.dir, "rows")
    ids = [7, 3, 3, ROWS - 1, -1]
    samples = ds.__getitems__(ids)
    assert isinstance(samples, Samples) and len(samples) == 5
    assert torch.utils.data.default_collate(samples) is samples.batch
    assert_rows(samples.batch, [7, 3, 3, ROWS - 1, ROWS - 1], data)
    for i, sample in zip(ids, samples):
        assert sample.keys() == {"x", "y"}
        np.testing.assert_array_equal(sample["x"].numpy(), ds[i]["x"].numpy())
        assert int(sample["y"]) == int(ds[i]["y"])
    # Samples taken apart are collated like any list of dicts.
    assert torch.equal(torch.utils.data.default_collate(list(samples))["x"], samples.batch["x"])
    with pytest.raises(IndexError):
        samples[5]
    seen = []
    dl = torch.utils.data.DataLoader(ds, batch_size=4, sampler=[1, 2, 3, 4], collate_fn=seen.append)
    list(dl)
    assert [len(s) for s in seen] == [4] and int(seen[0][3]["y"]) == data.y[4]


def test_pickles_as_names_and_settings_only(store, data, monkeypatch):
    ds = StoreDataset(store.dir, "rows", fields=("x",), settings={"read_timeout": "5s"})
    ds[0]
    state = pickle.loads(pickle.dumps(ds)).__dict__
    assert {k: v for k, v in state.items() if v is not None} == {
        "store": str(store.dir), "name": "rows", "fields": ("x",), "settings": {"read_timeout": "5s"},
        "verify": False}
    monkeypatch.setenv("DDSTAGE_STORE", str(store.dir))
    by_env = pickle.loads(pickle.dumps(StoreDataset(None, "rows")))
    assert len(by_env) == ROWS and by_env.fields == ("x", "y")
    np.testing.assert_array_equal(by_env[5]["x"].numpy(), data.x[5])


def test_bad_names_and_unpicklable_datasets_are_refused_in_the_parent(store, monkeypatch):
    for args, kw, words in [(("rows-nope",), {}, "rows-nope"), (("rows",), {"fields": ["z"]}, "no field 'z'"),
                            (("rows",), {"fields": []}, "fields is empty")]:
        with pytest.raises(ddstage.UsageError, match=words):
            StoreDataset(store.dir, *args, **kw)
    rows = ddstage.torch.Dataset(ddstage.Client(store.dir).open("rows"))
    with pytest.raises(ddstage.UsageError, match="use ddstage.torch.StoreDataset"):
        next(iter(loader(rows, 2, "spawn")))
    monkeypatch.delenv("DDSTAGE_STORE", raising=False)
    with pytest.raises(ddstage.UsageError, match="DDSTAGE_STORE"):
        StoreDataset(None, "rows")
