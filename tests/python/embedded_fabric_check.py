"""Run by test_embedded.py under `mpiexec -n N` with MPI restricted to TCP and no one-sided
support: ddstage.Store(transport="fabric") from mpi4py (MPI_THREAD_MULTIPLE) must make no
MPI window. argv: ROWS.H5 ROWS.DDX. Exit 0 and 'embedded fabric OK' from every rank is success."""
import sys

import h5py
import numpy as np
from mpi4py import MPI

import ddstage


def main(rows_h5, rows_ddx):
    comm = MPI.COMM_WORLD
    with h5py.File(rows_h5) as f:
        x = f["features"][:]
    settings = {"fabric.provider": "tcp", "fabric.domain": "lo"}
    with ddstage.Store(comm, transport="fabric", settings=settings) as store:
        assert store.thread_level == MPI.THREAD_MULTIPLE, store.thread_level
        rows = store.dataset(store.load(rows_ddx, verify=True))
        rng = np.random.default_rng(comm.rank)
        for _ in range(5):
            ids = np.concatenate([rng.integers(0, len(x), 50), [0, len(x) - 1]])
            np.testing.assert_array_equal(rows.get_batch("x", ids), x[ids])
            np.testing.assert_array_equal(rows.get_batch_collective("x", ids), x[ids])
    print(f"rank {comm.rank}: embedded fabric OK", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
