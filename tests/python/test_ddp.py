"""DDP over ddstage.torch.Loader with real torch.distributed ranks (gloo on loopback, one
process each, ddp_check.py) reading a served store, on 2561 samples, which neither 2 nor 3
ranks divide: every rank runs the same number of steps, the job ends, and each epoch's
union of samples over the ranks is what the Loader's docs promise; the same with no store,
every rank reading the index's origin files (ddstage.open)."""
import json
import os
import socket
import subprocess

import numpy as np
import pytest

from conftest import BIN, PYTHON, run

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES, BATCH, EPOCHS, SEED = 2561, 64, 2, 3  # the case: 21 against 20 batches at 2 ranks
JOB_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def ddp_index(tmp_path_factory):
    """ddp.ddx: id[i] == i, v[i] == i + [0, .1, ..., .7]."""
    root = tmp_path_factory.mktemp("ddp")
    np.save(root / "id.npy", np.arange(SAMPLES, dtype=np.int64))
    np.save(root / "v.npy", np.arange(SAMPLES, dtype=np.float32)[:, None] + np.arange(8, dtype=np.float32) / 10)
    run(BIN, "flatten", root / "id.npy", root / "v.npy", "-o", root / "ddp.ddx")
    return root / "ddp.ddx"


@pytest.fixture(scope="module")
def ddp_store(store, ddp_index):
    """The module's store with `ddp` loaded."""
    store.load(ddp_index, "ddp")
    return store


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(source, world, drop_last, tmp_path):
    """run_ranks, once more on another port when another test took the free port before rank 0
    bound it (ctest runs test files side by side)."""
    try:
        return run_ranks(source, world, drop_last, tmp_path, free_port())
    except PortTaken:
        return run_ranks(source, world, drop_last, tmp_path, free_port())


class PortTaken(Exception):
    pass


def run_ranks(source, world, drop_last, tmp_path, port):
    """Starts WORLD ranks reading source, (STORE, DATASET) for ddp_check.py, and waits for them
    all (bounded; killed by pid past the bound)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([PYTHON, os.path.join(HERE, "ddp_check.py"), *map(str, source), str(r),
                               str(world), str(port), str(BATCH), str(EPOCHS), str(int(drop_last)),
                               str(tmp_path / f"rank{r}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
               for r in range(world)]
    try:
        outputs = [p.communicate(timeout=JOB_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode != 0 and "Address already in use" in output for p, output in zip(procs, outputs)):
        raise PortTaken()
    for r, (p, output) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{output}"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("world,drop_last", [(2, False), (3, False), (2, True)])
def test_ddp_ranks_step_together_and_read_what_the_docs_promise(ddp_store, world, drop_last, tmp_path):
    check_job(run_job((ddp_store.dir, "ddp"), world, drop_last, tmp_path), world, drop_last)


def test_ddp_without_a_store_reads_the_origin_the_same(ddp_index, tmp_path):
    check_job(run_job(("-", ddp_index), 2, False, tmp_path), 2, False)


def check_job(ranks, world, drop_last):
    assert all(r["same_weights"] for r in ranks)
    for epoch in range(EPOCHS):
        steps = {r["steps"][epoch] for r in ranks}
        order = np.random.Generator(np.random.PCG64([SEED, epoch])).permutation(SAMPLES)
        seen = sorted(i for r in ranks for i in r["ids"][epoch])
        if drop_last:
            # Full batches only: the first steps * batch * world samples of the order, once.
            assert steps == {(SAMPLES // world) // BATCH}
            assert seen == sorted(order[:len(seen)]) and len(seen) == steps.pop() * BATCH * world
        else:
            # Every sample once, plus the first (-SAMPLES % world) of the order once more.
            assert steps == {-(-(-(-SAMPLES // world)) // BATCH)}  # ceil(ceil(SAMPLES / world) / BATCH)
            assert seen == sorted(np.concatenate([np.arange(SAMPLES), order[:-SAMPLES % world]]))
