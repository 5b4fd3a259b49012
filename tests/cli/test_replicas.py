"""Replicas and a rank's loss, on one host: `mpiexec --enable-recovery` (so that a rank's death
is not the job's), two copies of every sample on distinct ranks, a rank SIGKILLed, the store
serving on without it (marked lost in store.yaml, the dataset degraded; one held once is
lost), `load --repair`
restoring the copies from origin, every sample read byte-identical to origin throughout, and
`stop` ending everything with nothing left behind."""
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from conftest import assert_usage_error, flatten, read_bytes
from test_server_life import assert_not_misjudged, control
from test_store import serve, wait_dead  # noqa: F401  (fixture: a served store)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import noticed_within, wait_until  # noqa: E402

RECOVERY = ["--enable-recovery"]
PEER_TIMEOUT_S = 2
SAMPLES = 120
ALL_IDS = f"0-{SAMPLES - 1}"


def status(ddstage, store_dir):
    """`status --json`: (exit code, report). Exit 1 says the store is not healthy."""
    proc = ddstage.run("status", "--store", store_dir, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def copies_of_every_sample(store_dir, name):
    """From store.yaml: for each sample, the ranks of the regions holding it."""
    d = yaml.safe_load((store_dir / "store.yaml").read_text())
    [ds] = [x for x in d["datasets"] if x["name"] == name]
    holders = [[] for _ in range(SAMPLES)]
    for g in ds["regions"]:
        for s in range(g["first"], g["last"]):
            holders[s].append(g["rank"])
    return holders


def assert_reads_match(ddstage, store, index, name="s"):
    """Every sample, through the store (a lost rank's copies skipped), equals origin."""
    served = ddstage.ok("read", "--store", store.dir, "--dataset", name, "--ids", ALL_IDS,
                        binary=True).stdout
    assert served == read_bytes(ddstage, index, ALL_IDS)


@pytest.mark.busy
def test_a_lost_rank_costs_one_copy_and_repair_restores_it(ddstage, gen, serve, tmp_path):
    gen.ok("files", tmp_path / "tree", "--samples", str(SAMPLES), "--min-bytes", "1", "--max-bytes", "3000")
    index = flatten(ddstage, tmp_path / "s.ddx", tmp_path / "tree")
    store = serve(3, env={"DDSTAGE_PEER_TIMEOUT": f"{PEER_TIMEOUT_S}s"}, mpiexec_args=RECOVERY)
    pids = store.pids()

    assert_usage_error(ddstage.run("load", "--store", store.dir, index, "--replicas", "4"), "3")
    assert_usage_error(ddstage.run("load", "--store", store.dir, index, "--replicas", "two"), "--replicas")
    assert_usage_error(ddstage.run("load", "--store", store.dir, index, "--repair"), "--repair")
    proc = ddstage.ok("load", "--store", store.dir, index, "--name", "s", "--replicas", "2")
    assert f"loaded 's': {SAMPLES} samples" in proc.stdout
    # Three ranks on one host: the copies lie on distinct ranks, and the user is told that a
    # node's loss could cost both.
    assert "ddstage: warning:" in proc.stderr and "host" in proc.stderr, proc.stderr
    holders = copies_of_every_sample(store.dir, "s")
    assert all(len(h) == 2 and h[0] != h[1] for h in holders), holders
    code, st = status(ddstage, store.dir)
    [ds] = st["datasets"]
    assert code == 0 and ds["state"] == "healthy" and ds["replicas"] == 2, st
    assert ds["samples_short"] == 0 and ds["samples_lost"] == 0 and ds["lost_ranks"] == []
    assert sum(ds["samples_per_rank"]) == 2 * SAMPLES
    assert [r["lost"] for r in st["ranks"]] == [False, False, False]
    assert_reads_match(ddstage, store, index)
    # One copy: a rank's loss costs its samples, until a repair reads them from origin again.
    ddstage.ok("load", "--store", store.dir, index, "--name", "one")

    # A rank's own socket takes rank 0's parts only, never a client's request.
    reply = control(store, {"op": "stop"}, rank=2)
    assert reply["ok"] is False and "rank 0's parts" in reply["error"], reply

    held_by_1 = sum(1 for h in holders if 1 in h)
    os.kill(pids[1], signal.SIGKILL)
    wait_until(lambda: yaml.safe_load((store.dir / "store.yaml").read_text())["ranks"][1].get("lost"),
               store.within(noticed_within(PEER_TIMEOUT_S)), lambda: "rank 1 was never marked lost:\n" + store.output())
    assert_not_misjudged(store, live=[0, 2])
    code, st = status(ddstage, store.dir)
    ds, one = st["datasets"]
    assert code == 1, st
    assert one["state"] == "lost" and one["samples_lost"] == one["samples_per_rank"][1] > 0, one
    assert [r["lost"] for r in st["ranks"]] == [False, True, False], st
    assert [r["state"] for r in st["ranks"]] == ["up", "lost", "up"], st
    assert ds["state"] == "degraded" and ds["lost_ranks"] == [1], ds
    assert ds["samples_short"] == held_by_1 > 0 and ds["samples_lost"] == 0, ds
    # Which samples: exactly those rank 1 held a copy of.
    short = {s for a, b in ds["short_ranges"] for s in range(a, b)}
    assert short == {s for s, h in enumerate(holders) if 1 in h} and ds["lost_ranges"] == [], ds
    assert sum(b - a for a, b in one["lost_ranges"]) == one["samples_lost"], one
    assert store.proc.poll() is None, "the job ended with rank 1:\n" + store.output()
    assert_reads_match(ddstage, store, index)

    proc = ddstage.ok("load", "--store", store.dir, "--repair")
    assert f"repaired 's': {held_by_1} samples" in proc.stdout, proc.stdout
    assert f"repaired 'one': {one['samples_lost']} samples" in proc.stdout, proc.stdout
    code, st = status(ddstage, store.dir)
    ds, one = st["datasets"]
    assert code == 0 and ds["state"] == "healthy" and ds["samples_short"] == 0, st
    assert one["state"] == "healthy" and one["samples_per_rank"][1] == 0, one
    assert ds["lost_ranks"] == [] and ds["samples_per_rank"][1] == 0 and st["ranks"][1]["lost"], st
    holders = copies_of_every_sample(store.dir, "s")
    assert all(len(h) == 2 and h[0] != h[1] and 1 not in h for h in holders), holders
    assert "nothing to repair" in ddstage.ok("load", "--store", store.dir, "--repair").stdout
    assert_reads_match(ddstage, store, index)
    assert_reads_match(ddstage, store, index, "one")

    assert_not_misjudged(store, live=[0, 2])
    proc = ddstage.ok("stop", "--store", store.dir)
    assert "stopped ranks 0,2" in proc.stdout and "rank 1 of the store" in proc.stdout, proc.stdout
    store.proc.wait(timeout=30)
    assert wait_dead(pids)
    assert store.segments() == [], "shared memory left behind"
