"""ddstage.torch against a served store: the Loader yields every sample exactly once per
epoch across simulated ranks, one order per (seed, epoch) on every rank, resumes exactly
from state_dict(), and stops its threads; the map-style Dataset feeds torch's DataLoader.
The `seq` dataset's samples say which they are: id[i] == i."""
import threading
import time

import numpy as np
import pytest

import ddstage
from conftest import FILES, ROWS, SEQ

torch = pytest.importorskip("torch")
import ddstage.torch  # noqa: E402  (needs torch)


@pytest.fixture(scope="module")
def seq(store):
    return ddstage.Client(store.dir).open("seq")


def ids_of(loader):
    return [b["id"].numpy().copy() for b in loader]


def test_batches_are_tensors_of_the_rows(seq, store, data):
    loader = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=64, seed=1)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-SEQ // 64)
    for b in batches:
        assert b["id"].dtype == torch.int64 and b["v"].dtype == torch.float32 and b["v"].shape[1:] == (8,)
        np.testing.assert_allclose(b["v"].numpy(), b["id"].numpy()[:, None] + np.arange(8) / 10, rtol=1e-6)
    rows = ddstage.Client(store.dir).open("rows")
    for b in ddstage.torch.Loader(rows, fields=["x"], batch_size=50, shuffle=False):
        assert b["x"].shape == (50, 768)
    first = next(iter(ddstage.torch.Loader(rows, batch_size=5, shuffle=False)))
    np.testing.assert_array_equal(first["x"].numpy(), data.x[:5])
    np.testing.assert_array_equal(first["y"].numpy(), data.y[:5])


@pytest.mark.parametrize("world", [1, 3, 4])
def test_every_sample_once_per_epoch_across_ranks(seq, world):
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=7, seed=5, rank=rank, world_size=world)
            loader.set_epoch(epoch)
            batches = ids_of(loader)
            assert len(batches) == len(loader)
            seen.extend(np.concatenate(batches))
        assert sorted(seen) == list(range(SEQ))


def test_drop_last_gives_every_rank_the_same_full_batches(seq):
    counts = set()
    seen = []
    for rank in range(3):
        loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=16, seed=2, rank=rank, world_size=3,
                                      drop_last=True)
        batches = ids_of(loader)
        assert all(len(b) == 16 for b in batches) and len(batches) == len(loader)
        counts.add(len(batches))
        seen.extend(np.concatenate(batches))
    assert counts == {(SEQ // 3) // 16} and len(set(seen)) == len(seen)


def test_order_depends_on_seed_and_epoch_only(seq):
    def order(seed, epoch, threads=1, prefetch=2):
        loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=10, seed=seed, rank=1, world_size=2,
                                      threads=threads, prefetch=prefetch)
        loader.set_epoch(epoch)
        return np.concatenate(ids_of(loader))

    same = order(3, 4)
    np.testing.assert_array_equal(same, order(3, 4, threads=3, prefetch=5))
    assert not np.array_equal(same, order(3, 5)) and not np.array_equal(same, order(4, 4))
    # The global order is numpy's PCG64 permutation seeded with [seed, epoch], rank 1 of 2.
    expected = np.random.Generator(np.random.PCG64([3, 4])).permutation(SEQ)[1::2]
    np.testing.assert_array_equal(same, expected)
    unshuffled = ddstage.torch.Loader(seq, fields=["id"], batch_size=10, shuffle=False, rank=1, world_size=2)
    np.testing.assert_array_equal(np.concatenate(ids_of(unshuffled)), np.arange(1, SEQ, 2))


@pytest.mark.parametrize("threads,prefetch", [(1, 1), (3, 6)])
def test_resume_mid_epoch_yields_exactly_the_rest(seq, threads, prefetch):
    kw = dict(fields=["id"], batch_size=9, seed=11, rank=0, world_size=2, threads=threads, prefetch=prefetch)
    loader = ddstage.torch.Loader(seq, **kw)
    loader.set_epoch(2)
    it = iter(loader)
    head = [next(it)["id"].numpy().copy() for _ in range(5)]
    time.sleep(0.2)  # let the threads read ahead: batches read but not yielded must not count
    state = loader.state_dict()
    assert state["position"] == 5 and state["epoch"] == 2 and state["seed"] == 11
    rest = [b["id"].numpy().copy() for b in it]

    resumed = ddstage.torch.Loader(seq, **{**kw, "seed": 0})
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the saved epoch again: keeps the position
    again = ids_of(resumed)
    assert len(again) == len(rest) == len(loader) - 5
    for a, b in zip(again, rest):
        np.testing.assert_array_equal(a, b)
    full = np.concatenate(head + rest)
    assert len(set(full)) == len(full) == len(range(0, SEQ, 2))
    # At the end of an epoch the state says so; the next epoch starts from its first batch.
    assert resumed.state_dict()["position"] == len(resumed)
    resumed.set_epoch(3)
    assert len(ids_of(resumed)) == len(resumed)


def test_state_of_another_configuration_is_refused(seq):
    state = ddstage.torch.Loader(seq, fields=["id"], batch_size=9).state_dict()
    with pytest.raises(ddstage.UsageError, match="batch_size=9"):
        ddstage.torch.Loader(seq, fields=["id"], batch_size=10).load_state_dict(state)


def test_breaking_off_stops_the_threads(seq):
    before = threading.active_count()
    loader = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=4, threads=3, prefetch=3)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() == before
    assert loader.state_dict()["position"] == 3


def test_a_reader_error_reaches_the_consumer(seq):
    class Failing:
        """A dataset whose readers fail on their third batch."""
        samples, fields, field = seq.samples, seq.fields, seq.field

        def reader(self):
            inner, calls = seq.reader(), [0]

            class R:
                def get_batch(self, *a, **kw):
                    calls[0] += 1
                    if calls[0] == 3:
                        raise ddstage.Error("store gone")
                    return inner.get_batch(*a, **kw)
            return R()

    loader = ddstage.torch.Loader(Failing(), fields=["id"], batch_size=10)
    got = []
    with pytest.raises(ddstage.Error, match="store gone"):
        for b in loader:
            got.append(b)
    assert len(got) == 2


def test_bad_arguments(seq):
    for kw, words in [({"batch_size": 0}, "batch_size"), ({"rank": 2, "world_size": 2}, "rank 2"),
                      ({"threads": 0}, "threads"), ({"fields": ["nope"]}, "nope"), ({"fields": []}, "empty")]:
        with pytest.raises(ddstage.UsageError, match=words):
            ddstage.torch.Loader(seq, **kw)


def test_variable_fields_come_as_values_and_offsets(store, data):
    files = ddstage.Client(store.dir).open("files")
    name = next(iter(files.fields))
    loader = ddstage.torch.Loader(files, batch_size=16, shuffle=False)
    got = []
    for b in loader:
        values, offsets = b[name]
        assert values.dtype == torch.uint8 and offsets.dtype == torch.int64
        got += [bytes(r.numpy()) for r in ddstage.split_rows(values, offsets)]
    assert got == data.files[:FILES]


def test_map_style_dataset_with_torch_dataloader(store, data):
    rows = ddstage.Client(store.dir).open("rows")
    ds = ddstage.torch.Dataset(rows)
    assert len(ds) == ROWS
    sample = ds[-1]
    np.testing.assert_array_equal(sample["x"].numpy(), data.x[ROWS - 1])
    assert int(sample["y"]) == data.y[ROWS - 1]
    dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=range(40, 56))
    batches = list(dl)
    assert [b["x"].shape for b in batches] == [(8, 768), (8, 768)]
    np.testing.assert_array_equal(batches[1]["x"].numpy(), data.x[48:56])
