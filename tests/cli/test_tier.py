"""The node-local tier (issue 17): `bench tier` reads the same rows from a tier file, memory, a
raw pread and origin; `serve --tier memory,nvme:DIR` serves a dataset three times its memory
limit from tier files, byte for byte, and leaves no tier file behind, stopped or SIGKILLed."""
import json
import os
import stat

import pytest

from conftest import assert_usage_error, flatten, read_bytes
from test_store import read_store, serve, status  # noqa: F401  (serve: fixture)

WARM = ["memory", "tier-mapped", "tier-pread", "origin-pread"]
COLD = ["tier-mapped", "tier-pread", "origin-pread"]


def test_bench_tier_reads_the_same_rows_every_way(ddstage, tmp_path):
    """Two row sizes, warm and cold: every mode's cell, no mismatch, a ratio note per size and
    cache, a CSV line per cell; the bench's files are gone afterwards."""
    tier, origin, out = tmp_path / "tier", tmp_path / "origin", tmp_path / "t.json"
    origin.mkdir()
    proc = ddstage.ok("bench", "tier", "--dir", tier, "--origin", origin, "--row-bytes", "3K,64K",
                      "--bytes", "1M", "--reads", 20, "--json", out, "--csv", tmp_path / "t.csv")
    report = json.loads(out.read_text())
    assert report["schema"] == "ddstage-bench/2" and report["bench"] == "tier"
    cells = [(c["dims"]["row_bytes"], c["dims"]["cache"], c["dims"]["mode"]) for c in report["cells"]]
    assert cells == [(size, cache, mode) for size in (3072, 65536)
                     for cache, modes in (("warm", WARM), ("cold", COLD)) for mode in modes]
    for c in report["cells"]:
        assert c["rows"] == 20 and c["mismatches"] == 0 and c["bytes"] == 20 * c["dims"]["row_bytes"], c
    for size in (3072, 65536):
        for cache in ("warm", "cold"):
            assert any(n.startswith(f"ratio at {size} B, {cache}: tier-mapped costs") for n in report["notes"])
    assert "tier-mapped" in proc.stdout
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 1 + len(cells)
    # The tier directory is made private; nothing of the run stays in either directory.
    assert stat.S_IMODE(tier.stat().st_mode) == 0o700
    assert list(tier.iterdir()) == [] and list(origin.iterdir()) == []


def test_bench_tier_refuses_a_directory_others_can_write(ddstage, tmp_path):
    tier = tmp_path / "shared"
    tier.mkdir()
    tier.chmod(0o777)
    proc = ddstage.run("bench", "tier", "--dir", tier, "--bytes", "64K", "--reads", 1)
    assert_usage_error(proc, str(tier), "writable by")


@pytest.fixture
def rows(ddstage, gen, tmp_path):
    """500 rows of 3 KB (x) and their labels (y): 1.5 MB, 750 KB per rank of two. Skips first
    while serve lacks --tier."""
    if "--tier" not in ddstage.ok("serve", "--help").stdout:
        pytest.skip("ddstage serve has no --tier yet (the server wiring of issue 17's tier)")
    gen.ok("hdf5-rows", tmp_path / "rows.h5", "--samples", "500", "--shape", "768", "--dtype", "float32")
    return flatten(ddstage, tmp_path / "rows.ddx", tmp_path / "rows.h5", "--field", "x=/features",
                   "--field", "y=/labels")


def tier_files(tier, store):
    return sorted(p.name for p in tier.glob(store.prefix + "-*"))


def test_serve_tier_serves_three_times_its_memory_from_files(ddstage, serve, rows, tmp_path):
    """Two ranks, 256 KiB of memory each, a 750 KB shard each: the shards go to the tier, reads
    match origin byte for byte, status names the tier, and stop leaves no tier file; a store
    SIGKILLed with its shards on the tier is cleaned up by `ddstage clean`."""
    tier = tmp_path / "nvme"
    args = ("--mem-limit", "256K", "--tier", f"memory,nvme:{tier}:64M")
    store = serve(2, args=args)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--verify")
    assert len(tier_files(tier, store)) == 2
    assert stat.S_IMODE(tier.stat().st_mode) == 0o700
    for field in ("x", "y"):
        ids = "499,0,250-260,17,17,3"
        assert read_store(ddstage, store.dir, "rows", ids, field) == read_bytes(ddstage, rows, ids, field)
        assert read_store(ddstage, store.dir, "rows", "0-499", field) == read_bytes(ddstage, rows, "0-499", field)
    assert "nvme" in json.dumps(status(ddstage, store.dir))
    store.stop()
    assert tier_files(tier, store) == []

    killed = serve(2, name="killed", args=args)
    ddstage.ok("load", "--store", killed.dir, rows, "--name", "rows")
    assert len(tier_files(tier, killed)) == 2
    killed.kill()
    assert len(tier_files(tier, killed)) == 2  # SIGKILL frees nothing
    ddstage.ok("clean", env={"DDSTAGE_STORE": ""})
    assert tier_files(tier, killed) == []
    assert not list(tier.glob("*")), os.listdir(tier)
