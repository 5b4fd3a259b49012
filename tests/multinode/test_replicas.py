"""Two copies of every sample (`ddstage load --replicas 2`) on simulated nodes, and a node lost
while a reader streams batches: issue 17's failover, degraded status and repair.

The store has one rank per node on mn1..mn3 under `mpiexec --enable-recovery` (without it
mpiexec ends every rank when a node's daemon is lost: Cluster.mpiexec); the reader runs on mn4.
Its batches take every 20th sample, so each needs every rank (or a copy of it). A node other
than rank 0's is crashed (mn2) or cut off (mn3) while batches are in flight; then:
- every batch comes back byte-identical to origin, each within bound() of failover_timeout and
  read_timeout (paced by the reader's batches before the loss) plus twice its first batch (which
  connects to every rank, as a batch that fails over does anew), and after status says the
  loss, the reader reads every sample once more;
- within bound() of peer_timeout `status --json` shows rows degraded, naming the lost rank,
  with the samples it held short of a copy and none lost;
- `ddstage load --repair` brings back two copies on distinct nodes (none on the lost rank),
  status healthy, reads still byte-identical;
- `ddstage stop` ends every surviving rank, and nothing is left (assert_nothing_left).

Every case needs issue 17's server and readers; a build without them skips, visibly."""
import json
import subprocess
import time

import pytest

from conftest import (BIN, FAILOVER_TIMEOUT_S, PEER_TIMEOUT_S, SETTINGS_ENV, SURVIVAL_MISSING, SURVIVES_RANK_LOSS,
                      ServedStore, assert_nothing_left, bound, lose, origin_bytes, regions_of, status_json,
                      stop_survivors, wait_marked_lost)

NODES = 4
RANKS = 3
SAMPLES = 2000  # rows.ddx of conftest's datasets
STRIDE = 20  # batch b: samples b, b+20, b+40, ...: 100 samples from every region
PACE_BATCHES = 3
READ_TIMEOUT_S = float(SETTINGS_ENV["DDSTAGE_READ_TIMEOUT"].rstrip("s"))

pytestmark = [pytest.mark.skipif(not SURVIVES_RANK_LOSS, reason=SURVIVAL_MISSING), pytest.mark.busy]

# Streams rows' batches through one client, each checked against origin (a file of every
# sample's x, in order) and timed; after the first batch and PACE_BATCHES more says "reading",
# how long the first took (it also connects to every rank, as a batch that fails over does on
# the endpoint it opens anew) and the slowest of the others. Once its stdin is closed (the harness
# saw the loss in status) it reads one more whole pass and prints what it saw as JSON, its slowest
# batch since "reading" included. A failed or different batch ends it at once, exit 1, saying
# which.
READER = """
import json
import select
import sys
import time
import numpy as np
import ddstage
store, origin_path, samples, stride, pace_batches = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
origin = np.fromfile(origin_path, dtype=np.uint8).reshape(samples, -1)
rows = ddstage.Client(store).open("rows")
batches = [list(range(b, samples, stride)) for b in range(stride)]
done, first, slowest, last_pass = 0, 0.0, 0.0, False
while True:
    for ids in batches:
        t0 = time.monotonic()
        try:
            got = np.asarray(rows.get_batch("x", ids))
        except ddstage.Error as e:
            print(json.dumps({"batches": done, "error": str(e)}), flush=True)
            sys.exit(1)
        took = time.monotonic() - t0
        if done == 0:
            first = took
        else:
            slowest = max(slowest, took)
        if got.tobytes() != origin[ids].tobytes():
            print(json.dumps({"batches": done, "error": f"batch of ids {ids[0]}, {ids[1]}, ... differs from origin"}))
            sys.exit(1)
        done += 1
        if done == 1 + pace_batches:
            print("reading", first, slowest, flush=True)
            slowest = 0.0
    if last_pass:
        break
    last_pass = bool(select.select([sys.stdin], [], [], 0)[0])  # readable: closed (nothing is sent)
print(json.dumps({"batches": done, "slowest_s": slowest}), flush=True)
"""


@pytest.fixture(scope="module")
def origin_rows(work, datasets):
    """Every sample's x straight from origin, in id order, in a file every node sees."""
    path = work / "rows-x.bin"
    path.write_bytes(origin_bytes(datasets["rows"], f"0-{SAMPLES - 1}", "x"))
    return path


def copies(store, hosts):
    """For each sample of rows, the (rank, host) of every region holding it, from store.yaml."""
    held = [[] for _ in range(SAMPLES)]
    for g in regions_of(store, "rows"):
        for s in range(g["first"], g["last"]):
            held[s].append((g["rank"], hosts[g["rank"]]))
    return held


def assert_two_copies_on_distinct_nodes(store, hosts, avoiding=None):
    held = copies(store, hosts)
    bad = [s for s, h in enumerate(held) if len(h) != 2 or h[0][1] == h[1][1] or avoiding in (h[0][0], h[1][0])]
    assert not bad, f"{len(bad)} samples not on two distinct nodes (e.g. {bad[0]}: {held[bad[0]]})"


@pytest.mark.parametrize("how, lost_index", [("crash", 1), ("cut", 2)], ids=["crash", "cut"])
def test_reads_survive_a_lost_node(cluster, work, datasets, origin_rows, nodes_fresh, how, lost_index):
    store = ServedStore(cluster, work / f"store-{how}", RANKS, recovery=True)
    try:
        run_case(cluster, store, datasets, origin_rows, how, cluster.nodes[lost_index], lost_index)
    finally:
        store.kill()


def run_case(cluster, store, datasets, origin_rows, how, lost, lost_rank):
    reader_node, first = cluster.nodes[3], cluster.nodes[0]
    assert store.hosts() == [n.name for n in cluster.nodes[:RANKS]], store.hosts()
    first.run([BIN, "load", "--store", store.dir, datasets["rows"], "--name", "rows", "--replicas", "2"])
    assert_two_copies_on_distinct_nodes(store, store.hosts())
    held_by_lost = sum(1 for h in copies(store, store.hosts()) if lost_rank in [r for r, _ in h])
    code, report = status_json(reader_node, store)
    [rows] = report["datasets"]
    assert code == 0 and (rows["state"], rows["replicas"], rows["lost_ranks"]) == ("healthy", 2, []), report

    reader = reader_node.popen(["/usr/bin/python3", "-c", READER, store.dir, origin_rows, SAMPLES, STRIDE,
                                PACE_BATCHES], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        said = reader.stdout.readline().split()
        assert said[:1] == ["reading"], reader.communicate(timeout=bound(store.pace))
        connecting_batch, warm_batch = map(float, said[1:])
        # A batch that fails over waits failover_timeout, replaces its endpoint (connecting anew, as
        # the first batch did), then reads what is left of it within read_timeout.
        reconnect_s = 2 * connecting_batch
        lose(lost, how)
        lost_at = time.monotonic()
        code, report = wait_marked_lost(reader_node, store, lost_rank)
        noticed = time.monotonic() - lost_at
        # communicate() closes the reader's stdin: the rest of its pass, then a last one.
        out, err = reader.communicate(
            timeout=bound(2 * STRIDE * warm_batch, FAILOVER_TIMEOUT_S, READ_TIMEOUT_S) + reconnect_s)
    finally:
        reader.kill()
    assert reader.returncode == 0, (out, err, store.output())
    seen = json.loads(out.splitlines()[-1])
    # The pass the loss fell in, then at least one whole pass after status said it (the harness
    # may see the loss before the reader ends that pass, or after).
    assert seen["batches"] >= 2 * STRIDE, seen
    slowest_allowed = bound(warm_batch, FAILOVER_TIMEOUT_S, READ_TIMEOUT_S) + reconnect_s
    assert seen["slowest_s"] < slowest_allowed, (seen, slowest_allowed)
    assert noticed < bound(store.pace, PEER_TIMEOUT_S), noticed

    [rows] = report["datasets"]
    assert rows["state"] == "degraded" and rows["lost_ranks"] == [lost_rank], rows
    assert (rows["samples_short"], rows["samples_lost"]) == (held_by_lost, 0), rows

    first.run([BIN, "load", "--store", store.dir, "--repair"])
    code, report = status_json(reader_node, store)
    [rows] = report["datasets"]
    assert code == 0 and rows["state"] == "healthy" and rows["lost_ranks"] == [], report
    assert (rows["samples_short"], rows["samples_lost"]) == (0, 0), rows
    assert_two_copies_on_distinct_nodes(store, store.hosts(), avoiding=lost_rank)
    served = reader_node.run([BIN, "read", "--store", store.dir, "--dataset", "rows", "--ids", f"0-{SAMPLES - 1}",
                              "--field", "x"], text=False).stdout
    assert served == origin_rows.read_bytes(), "rows read after the repair differ from origin"

    stop_survivors(first, store, lost_rank)
    assert_nothing_left(cluster, store, lost, how, self_ended=True)
