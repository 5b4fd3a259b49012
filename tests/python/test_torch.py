"""ddstage.torch against a served store: the Loader gives every simulated rank the same
number of batches and every sample once per epoch (the padding's few repeats as documented),
one order per (seed, epoch) on every rank, resumes exactly from state_dict() at the same
world size and elastically at another, runs its hooks and a sampler, and stops its threads;
the map-style Dataset feeds torch's DataLoader.
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


def epoch_order(seed, epoch, n=SEQ):
    """The global order the docs promise: numpy's PCG64 permutation seeded with [seed, epoch]."""
    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(n)


@pytest.mark.parametrize("world", [1, 3, 4])
def test_every_sample_once_per_epoch_and_equal_counts(seq, world):
    # SEQ = 500: world 3 pads one sample, world 4 none.
    pad = -SEQ % world
    for epoch in (0, 1):
        seen, counts = [], set()
        for rank in range(world):
            loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=7, seed=5, rank=rank, world_size=world)
            loader.set_epoch(epoch)
            batches = ids_of(loader)
            assert len(batches) == len(loader)
            counts.add(len(batches))
            seen.extend(np.concatenate(batches))
        assert len(counts) == 1
        # Every sample once, and the first `pad` samples of the epoch's order once more.
        expected = np.concatenate([np.arange(SEQ), epoch_order(5, epoch)[:pad]])
        assert sorted(seen) == sorted(expected)


def test_counts_are_equal_where_shares_straddle_a_batch(seq):
    # 500 samples over 3 ranks: shares of 167 and 166, i.e. 2 batches of 166 against 1 unpadded.
    lengths = [len(ids_of(ddstage.torch.Loader(seq, fields=["id"], batch_size=166, rank=r, world_size=3)))
               for r in range(3)]
    assert lengths == [2, 2, 2]


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


def run_ranks(loaders, steps=None):
    """Each loader's batches of ids (the first `steps` only, when given), rank by rank."""
    out = []
    for loader in loaders:
        it = iter(loader)
        out.append([b["id"].numpy().copy() for b in (it if steps is None else (next(it) for _ in range(steps)))])
    return out


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2), (2, 1)])
def test_elastic_resume_reads_every_remaining_sample_once(seq, before, after):
    kw = dict(fields=["id"], seed=7)
    old = [ddstage.torch.Loader(seq, batch_size=9, rank=r, world_size=before, **kw) for r in range(before)]
    for loader in old:
        loader.set_epoch(1)
    head = np.concatenate([np.concatenate(b) for b in run_ranks(old, steps=5)])
    state = old[0].state_dict()
    assert state["consumed"] == 5 * 9 * before == len(head)
    new = [ddstage.torch.Loader(seq, batch_size=8, rank=r, world_size=after, **kw) for r in range(after)]
    for loader in new:
        loader.load_state_dict(state)
        loader.set_epoch(1)  # the saved epoch: keeps the resumed position
    rest = run_ranks(new)
    assert len({len(r) for r in rest}) == 1  # the same number of batches on every new rank
    rest = np.concatenate([np.concatenate(r) for r in rest])
    # The rest of the order is exactly what the old ranks had not read; the new padding
    # repeats its first samples only.
    remaining = epoch_order(7, 1)[len(head):]
    expected = np.concatenate([remaining, remaining[:-len(remaining) % after]])
    assert sorted(rest) == sorted(expected)
    assert sorted(np.concatenate([head, remaining])) == list(range(SEQ))
    # Saved again mid-way at the new size and resumed at a third, still every sample once.
    again = [ddstage.torch.Loader(seq, batch_size=8, rank=r, world_size=after, **kw) for r in range(after)]
    for loader in again:
        loader.load_state_dict(state)
    middle = np.concatenate([np.concatenate(b) for b in run_ranks(again, steps=2)])
    last = ddstage.torch.Loader(seq, batch_size=5, **kw)
    last.load_state_dict(again[0].state_dict())
    tail = np.concatenate(ids_of(last))
    assert sorted(np.concatenate([head, middle, tail])) == list(range(SEQ))
    # The next epoch is a whole one again.
    last.set_epoch(2)
    assert sorted(np.concatenate(ids_of(last))) == list(range(SEQ))


def test_a_finished_epoch_resumes_to_nothing(seq):
    done = ddstage.torch.Loader(seq, fields=["id"], batch_size=100, rank=1, world_size=2, drop_last=True)
    ids_of(done)
    state = done.state_dict()
    assert state["consumed"] == SEQ  # the dropped tail is not left over for a resumed run
    resumed = ddstage.torch.Loader(seq, fields=["id"], batch_size=64, world_size=3)
    resumed.load_state_dict(state)
    assert ids_of(resumed) == [] and len(resumed) == 0
    assert len(ids_of(resumed)) == len(resumed) == 3  # then whole epochs: ceil(ceil(500 / 3) / 64)


def test_states_that_cannot_resume_are_refused(seq, store):
    state = ddstage.torch.Loader(seq, fields=["id"], batch_size=9).state_dict()
    graphs = ddstage.Client(store.dir).open("graphs")
    with pytest.raises(ddstage.UsageError, match=f"samples={SEQ}"):
        ddstage.torch.Loader(graphs, batch_size=9).load_state_dict(state)
    with pytest.raises(ddstage.UsageError, match="shuffle=True"):
        ddstage.torch.Loader(seq, fields=["id"], batch_size=9, shuffle=False).load_state_dict(state)
    with pytest.raises(ddstage.UsageError, match="sampler"):
        ddstage.torch.Loader(seq, fields=["id"], sampler=range(10)).load_state_dict(state)
    with pytest.raises(ddstage.UsageError, match="sampler"):
        sampled = ddstage.torch.Loader(seq, fields=["id"], sampler=range(10)).state_dict()
        ddstage.torch.Loader(seq, fields=["id"]).load_state_dict(sampled)
    with pytest.raises(ddstage.UsageError, match="consumed"):
        ddstage.torch.Loader(seq, fields=["id"]).load_state_dict({k: v for k, v in state.items() if k != "consumed"})


def test_a_sampler_gives_the_ids_and_its_epoch(seq):
    samplers = [torch.utils.data.DistributedSampler(range(SEQ), num_replicas=3, rank=r, seed=4) for r in range(3)]
    loaders = [ddstage.torch.Loader(seq, fields=["id"], batch_size=16, sampler=s) for s in samplers]
    for epoch in (0, 3):
        for loader in loaders:
            loader.set_epoch(epoch)
        got = run_ranks(loaders)
        for loader, sampler, batches in zip(loaders, samplers, got):
            assert sampler.epoch == epoch and len(batches) == len(loader) == -(-len(sampler) // 16)
            np.testing.assert_array_equal(np.concatenate(batches), list(sampler))
    plain = ddstage.torch.Loader(seq, fields=["id"], batch_size=4, sampler=[9, 3, 3, 0, 499, 7], drop_last=True)
    assert [b.tolist() for b in ids_of(plain)] == [[9, 3, 3, 0]] and len(plain) == 1


def test_collate_fn_and_transform_run_in_the_reader_thread(seq):
    threads = set()

    def collate(rows):
        threads.add(threading.current_thread().name)
        assert isinstance(rows["id"], np.ndarray) and rows["v"].shape == (len(rows["id"]), 8)
        return torch.from_numpy(rows["v"]), torch.from_numpy(rows["id"])

    def transform(batch):
        threads.add(threading.current_thread().name)
        v, i = batch
        return {"v": v * 2, "id": i}

    loader = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=50, shuffle=False, collate_fn=collate,
                                  transform=transform, threads=2)
    batches = list(loader)
    assert threads == {"ddstage-loader-0", "ddstage-loader-1"}
    assert torch.equal(torch.cat([b["id"] for b in batches]), torch.arange(SEQ))
    np.testing.assert_allclose(batches[3]["v"].numpy(), 2 * (np.arange(150, 200)[:, None] + np.arange(8) / 10),
                               rtol=1e-6)
    # Without collate_fn the transform gets the dict of tensors.
    shifted = ddstage.torch.Loader(seq, fields=["id"], batch_size=50, shuffle=False,
                                   transform=lambda b: {"id": b["id"] + 1000})
    assert torch.equal(torch.cat([b["id"] for b in shifted]), torch.arange(SEQ) + 1000)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: pinning is tested instead")
def test_pin_memory_without_cuda_warns_and_yields_the_rows(seq):
    with pytest.warns(UserWarning, match="no CUDA device"):
        loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=100, shuffle=False, pin_memory=True)
    assert torch.equal(torch.cat([b["id"] for b in loader]), torch.arange(SEQ))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: pinned memory needs one")
def test_pin_memory_pins_every_tensor(seq):
    loader = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=100, shuffle=False, pin_memory=True,
                                  transform=lambda b: [b["id"], (b["v"],)])
    for ids, (v,) in loader:
        assert ids.is_pinned() and v.is_pinned()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: reading into it is tested instead")
def test_device_cuda_without_a_gpu_is_a_clear_error(seq):
    with pytest.raises(ddstage.UsageError, match="no CUDA device"):
        ddstage.torch.Loader(seq, device="cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device to read into")
def test_device_cuda_reads_into_device_tensors(seq):
    loader = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=64, seed=2, device="cuda:0")
    host = ddstage.torch.Loader(seq, fields=["id", "v"], batch_size=64, seed=2)
    for d, h in zip(loader, host):
        assert d["v"].is_cuda and torch.equal(d["v"].cpu(), h["v"]) and torch.equal(d["id"].cpu(), h["id"])


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
                      ({"threads": 0}, "threads"), ({"fields": ["nope"]}, "nope"), ({"fields": []}, "empty"),
                      ({"sampler": range(5), "shuffle": False}, "shuffle=False does not apply"),
                      ({"sampler": range(5), "rank": 0, "world_size": 2}, "rank=0, world_size=2"),
                      ({"sampler": (i for i in range(5))}, "generator has no len"),
                      ({"device": "nonsense"}, "not a torch device"), ({"device": "meta"}, "CUDA device only")]:
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
