"""Reads across simulated nodes: a 3-rank store, one rank per node (mn1..mn3), started by
mpiexec on mn1; readers on mn1 (a node with a rank: its own shard through shared memory, the
others over libfabric) and on mn4 (no rank: everything over libfabric). CLI and Python reads
are compared byte for byte with the same ids read straight from origin; the C++ app
(examples/reader-app, as ctest's install.reader_app builds it against the installed package)
checks every row against the index's checksums."""
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import BIN, ServedStore, bound, origin_bytes, store_files, wait_no_ddstage

NODES = 4
RANKS = 3
TRANSPORTS = {"auto": {}, "fabric": {"DDSTAGE_TRANSPORT": "fabric"}}


@pytest.fixture(scope="module")
def store(cluster, work, datasets):
    served = ServedStore(cluster, work / "store", RANKS)
    try:
        for name, ddx in datasets.items():
            cluster.nodes[0].run([BIN, "load", "--store", served.dir, ddx, "--name", name])
        yield served
        served.stop()
    finally:
        served.kill()
    assert wait_no_ddstage(cluster.nodes, bound(served.pace)) == {}
    assert {n.name: store_files(n) for n in cluster.nodes} == {n.name: [] for n in cluster.nodes}


def spec_for(samples, seed, count=80):
    """Unsorted ids with repeats and ranges that cross every shard boundary."""
    rng = np.random.default_rng(seed)
    items = [str(i) for i in rng.integers(0, samples, count)]
    third = samples // RANKS
    items += [f"{third - 2}-{third + 2}", f"{2 * third - 1}-{2 * third + 1}", "0", str(samples - 1), items[0]]
    rng.shuffle(items)
    return ",".join(items)


def fabric_ip(address_hex):
    """The IPv4 address in a published libfabric address (a struct sockaddr_in, in hex)."""
    raw = bytes.fromhex(address_hex)
    assert int.from_bytes(raw[:2], "little") == socket.AF_INET, address_hex
    return socket.inet_ntoa(raw[4:8])


def test_one_rank_per_node_publishes_its_node_address(cluster, store):
    """Each rank runs on its own node and publishes that node's bridge address for libfabric
    (never loopback); status from a node without a rank sees all three."""
    ranks = yaml.safe_load((store.dir / "store.yaml").read_text())["ranks"]
    nodes = cluster.nodes[:RANKS]
    assert [r["host"] for r in ranks] == [n.name for n in nodes]
    assert [fabric_ip(r["fabric_address"]) for r in ranks] == [n.address for n in nodes]
    status = json.loads(cluster.nodes[3].run([BIN, "status", "--store", store.dir, "--json"]).stdout)
    assert len(status["ranks"]) == RANKS
    assert all("fabric" in r["transports"] for r in status["ranks"]), status


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reader", [0, 3], ids=["node-with-rank", "node-without-rank"])
def test_cli_reads_equal_origin(cluster, store, datasets, work, transport, reader):
    node = cluster.nodes[reader]
    out = work / f"cli-{transport}-{node.name}.bin"
    for name, field, samples in (("rows", "x", 2000), ("rows", "y", 2000), ("files", None, 400)):
        spec = spec_for(samples, seed=reader)
        argv = [BIN, "read", "--store", store.dir, "--dataset", name, "--ids", spec, "--verify", "-o", out]
        node.run(argv + (["--field", field] if field else []), env=TRANSPORTS[transport])
        assert out.read_bytes() == origin_bytes(datasets[name], spec, field), (name, field)


PYTHON_READER = """
import sys
import ddstage
store, transport, out, spec = sys.argv[1:5]
ids = [int(i) for i in spec.split(",")]
client = ddstage.Client(store, {"transport": transport})
rows, files = client.open("rows"), client.open("files")
data, offsets = files.get_batch(next(iter(files.fields)), [i % 400 for i in ids], verify=True)
with open(out, "wb") as f:
    f.write(rows.get_batch("x", ids, verify=True).tobytes())
    f.write(rows.get_batch("y", ids).tobytes())
    f.write(data[offsets[0]:offsets[-1]].tobytes())
"""


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reader", [0, 3], ids=["node-with-rank", "node-without-rank"])
def test_python_reads_equal_origin(cluster, store, datasets, work, transport, reader):
    node = cluster.nodes[reader]
    ids = [int(i) for i in np.random.default_rng(10 + reader).integers(0, 2000, 100)] + [0, 666, 667, 1999]
    out = work / f"py-{transport}-{node.name}.bin"
    node.run(["/usr/bin/python3", "-c", PYTHON_READER, store.dir, transport, out, ",".join(map(str, ids))])
    spec = ",".join(map(str, ids))
    expected = (origin_bytes(datasets["rows"], spec, "x") + origin_bytes(datasets["rows"], spec, "y") +
                origin_bytes(datasets["files"], ",".join(str(i % 400) for i in ids)))
    assert out.read_bytes() == expected


READER_APP = Path(os.environ.get("DDSTAGE_READER_APP", "/nonexistent"))


@pytest.mark.parametrize("reader", [0, 3], ids=["node-with-rank", "node-without-rank"])
def test_cpp_app_reads_verified_rows(cluster, store, reader):
    """A C++ app linking the installed libcore (no MPI in the client) reads random batches
    from every rank, each row checked against its checksum."""
    if not READER_APP.is_file():
        pytest.skip(f"no {READER_APP}: ctest's install.reader_app builds it (run it first)")
    node = cluster.nodes[reader]
    for dataset, field, rows in (("rows", "x", 64 * 10), ("files", None, 64 * 10)):
        argv = [READER_APP, "--store", store.dir, "--dataset", dataset, "--batch", 64, "--batches", 10,
                "--seed", reader + 1] + (["--field", field] if field else [])
        out = node.run(argv).stdout
        assert out.startswith(f"read {rows} rows, ") and "verified" in out, out


EMBEDDED = """
import sys
import ddstage
from mpi4py import MPI
comm = MPI.COMM_WORLD
ddx, spec, out = sys.argv[1], sys.argv[2], sys.argv[3]
ids = [int(i) for i in spec.split(",")]
with ddstage.Store(comm, transport="fabric") as store:
    store.load(ddx)
    rows = store.dataset("rows").get_batch("x", ids, verify=True)
    with open(f"{out}.{comm.rank}", "wb") as f:
        f.write(rows.tobytes())
print("embedded OK", flush=True)
"""


@pytest.mark.needs_issue12
def test_embedded_store_with_fabric_across_nodes(cluster, datasets, work):
    """ddstage.Store inside an MPI job of one rank per node, transport fabric (TCP-only
    nodes: no MPI window): every rank's reads from every other rank equal origin."""
    spec = ",".join(str(i) for i in np.random.default_rng(7).integers(0, 2000, 200))
    out = work / "embedded"
    argv = cluster.mpiexec(RANKS, ["/usr/bin/python3", "-c", EMBEDDED, datasets["rows"], spec, out])
    proc = cluster.nodes[0].run(argv, check=False, timeout=180)
    assert proc.returncode == 0 and proc.stdout.count("embedded OK") == RANKS, proc.stdout + proc.stderr
    expected = origin_bytes(datasets["rows"], spec, "x")
    for rank in range(RANKS):
        assert Path(f"{out}.{rank}").read_bytes() == expected, rank
