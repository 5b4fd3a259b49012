"""ddstage.Store from mpi4py in a real `mpiexec -n 2` job (embedded_store_check.py asserts
on every rank), and the example training script with an embedded and a served store."""
import os
from pathlib import Path

import pytest

import ddstage
from conftest import PYTHON, mpiexec, run

HERE = Path(__file__).parent
EXAMPLE = Path(os.environ.get("DDSTAGE_EXAMPLES", HERE.parent.parent / "examples" / "python")) / "train_mlp.py"

pytestmark = pytest.mark.skipif(not ddstage.HAVE_MPI, reason="ddstage built without MPI: no embedded Store")


def test_embedded_store_under_mpiexec(data):
    pytest.importorskip("mpi4py")
    pytest.importorskip("torch")
    proc = mpiexec(2, PYTHON, HERE / "embedded_store_check.py", data.root / "rows.h5", data.ddx["rows"],
                   data.ddx["seq"], data.root / "graphs.h5", data.ddx["graphs"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("embedded OK") == 2, proc.stdout + proc.stderr


def test_embedded_fabric_store_needs_no_mpi_window(data):
    """transport="fabric" under MPI over TCP alone with osc/rdma, as across TCP-only nodes (on
    one node osc/sm would serve any window): MPI_Win_allocate would fail with MPI_ERR_WIN, so
    the Store must create none; mpi4py's MPI_THREAD_MULTIPLE is fine."""
    pytest.importorskip("mpi4py")
    tcp_only = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_osc": "rdma",
                "FI_TCP_IFACE": "lo"}
    proc = mpiexec(2, PYTHON, HERE / "embedded_fabric_check.py", data.root / "rows.h5", data.ddx["rows"],
                   env=tcp_only)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("embedded fabric OK") == 2, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def demo(data, tmp_path_factory):
    """The demo's dataset, smaller: hdf5-rows of 28x28 float32 with labels 0-9."""
    root = tmp_path_factory.mktemp("demo")
    run(os.environ.get("DDSTAGE_GEN", "ddstage-gen"), "hdf5-rows", root / "train.h5", "--samples", 2000,
        "--shape", "28,28", "--dtype", "float32")
    run(os.environ.get("DDSTAGE_BIN", "ddstage"), "flatten", root / "train.h5", "--field", "x=/features",
        "--field", "y=/labels", "-o", root / "train.ddx")
    return root / "train.ddx"


def test_example_trains_with_an_embedded_store(demo):
    pytest.importorskip("mpi4py")
    pytest.importorskip("torch")
    proc = mpiexec(2, PYTHON, EXAMPLE, "--embedded", demo, "--epochs", 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "epoch 1: loss" in proc.stdout and "over 2 rank(s)" in proc.stdout, proc.stdout


def test_example_trains_with_a_served_store(demo, store):
    pytest.importorskip("torch")
    run(os.environ.get("DDSTAGE_BIN", "ddstage"), "load", "--store", store.dir, demo, "--name", "train")
    proc = run(PYTHON, EXAMPLE, "--store", store.dir, "--epochs", 2)
    assert b"epoch 1: loss" in proc and b"over 1 rank(s)" in proc, proc
