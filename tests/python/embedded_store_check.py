"""Run by test_embedded.py under `mpiexec -n N`: ddstage.Store from mpi4py on every rank.

argv: ROWS.H5 ROWS.DDX SEQ.DDX GRAPHS.H5 GRAPHS.DDX. Each rank checks what it reads against
h5py, with asserts; exit 0 and 'embedded OK' from every rank is success."""
import sys

import h5py
import numpy as np
from mpi4py import MPI

import ddstage
import ddstage.torch


def main(rows_h5, rows_ddx, seq_ddx, graphs_h5, graphs_ddx):
    comm = MPI.COMM_WORLD
    with h5py.File(rows_h5) as f:
        x, y = f["features"][:], f["labels"][:]
    with h5py.File(graphs_h5) as f:
        gx, ptr = f["x"][:], f["x_ptr"][:]
    store = ddstage.Store(comm, max_round_bytes=64 << 10)
    assert (store.rank, store.size) == (comm.rank, comm.size)
    assert store.load(rows_ddx) == "rows" and store.load(seq_ddx, name="seq") == "seq"
    store.load(graphs_ddx, name="graphs", verify=True)

    rows = store.dataset("rows")
    assert rows.samples == len(x) and rows.field("x").shape == (768,)
    rng = np.random.default_rng(comm.rank)
    for _ in range(5):
        ids = rng.integers(0, len(x), 50)
        np.testing.assert_array_equal(rows.get_batch("x", ids, verify=True), x[ids])
        np.testing.assert_array_equal(rows.get_batch("y", ids), y[ids])
        # Collective: each rank its own ids, possibly none.
        mine = ids if comm.rank % 2 == 0 else ids[:0]
        np.testing.assert_array_equal(rows.get_batch_collective("x", mine), x[mine])
    # Bad ids on rank 1 alone: every rank gets the error, none waits for ever in the exchange.
    for bad in ([len(x)], [-1]):
        try:
            rows.get_batch_collective("x", bad if comm.rank == 1 else [0, 1])
            raise AssertionError(f"a collective read with {bad} on rank 1 returned")
        except (ddstage.UsageError, ValueError) as e:
            assert comm.rank == 1 or "rank 1 failed" in str(e), e

    graphs = store.dataset("graphs")
    ids = rng.integers(0, graphs.samples, 30)
    values, offsets = graphs.get_batch("x", ids)
    for row, i in zip(ddstage.split_rows(values, offsets), ids):
        np.testing.assert_array_equal(row, gx[ptr[i]:ptr[i + 1]])

    try:
        store.dataset("nope")
        raise AssertionError("an unknown dataset was opened")
    except ddstage.UsageError as e:
        assert "nope" in str(e) and "rows" in str(e), e

    # The Loader over the embedded dataset, ranks from the communicator: all ids once.
    seq = store.dataset("seq")
    loader = ddstage.torch.Loader(seq, fields=["id"], batch_size=16, seed=3, rank=comm.rank,
                                  world_size=comm.size, threads=2)
    mine = np.concatenate([b["id"].numpy() for b in loader])
    everything = np.concatenate(comm.allgather(mine))
    assert sorted(everything) == list(range(seq.samples))

    reader = rows.reader()
    store.close()
    with ddstage.Store(comm, mem_limit=4096) as small:
        try:
            small.load(rows_ddx)
            raise AssertionError("a load over mem_limit was accepted")
        except ddstage.UsageError as e:
            assert "rank" in str(e), e
    try:
        reader.get_batch("x", [0])
        raise AssertionError("a closed Store was read")
    except ddstage.UsageError as e:
        assert "closed" in str(e), e
    print(f"embedded OK rank {comm.rank}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
