"""Lazy first-touch staging (issue 17): `load --lazy` returns with nothing read; the first read of
a sample is served from origin by its owner rank, which keeps it, so every later read comes from
the store; each sample is read from origin at most once per copy; `--prefetch` fills the rest in
the background; a source changed after flattening is refused as a stale index is."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_runtime_error, flatten, read_bytes
from test_store import read_store, serve, status  # noqa: F401  (serve: fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from local_mpi import pid_alive  # noqa: E402

SAMPLES = 300


@pytest.fixture
def rows(ddstage, gen, tmp_path):
    """300 files of 1-9 KB, one per sample, each its own checksum block (so each sample is staged
    on its own)."""
    gen.ok("files", tmp_path / "tree", "--samples", SAMPLES, "--min-bytes", "1000", "--max-bytes", "9000")
    return flatten(ddstage, tmp_path / "rows.ddx", tmp_path / "tree")


def dataset_status(ddstage, store, name="rows"):
    [d] = [d for d in status(ddstage, store.dir)["datasets"] if d["name"] == name]
    return d


def test_lazy_load_stages_each_sample_once_on_first_touch(ddstage, serve, rows):
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy")
    d = dataset_status(ddstage, store)
    assert d["lazy"] is True and d["staged"] == 0 and d["origin_reads"] == 0, d
    ids = "299,0,150-160,17,17,3"
    assert read_store(ddstage, store.dir, "rows", ids) == read_bytes(ddstage, rows, ids)
    first = dataset_status(ddstage, store)
    # The samples asked, each read from origin once by its rank, none other.
    assert first["origin_reads"] == first["staged"] == 15, first
    read_store(ddstage, store.dir, "rows", ids)
    assert dataset_status(ddstage, store)["origin_reads"] == 15
    every = f"0-{SAMPLES - 1}"
    assert read_store(ddstage, store.dir, "rows", every) == read_bytes(ddstage, rows, every)
    done = dataset_status(ddstage, store)
    assert done["staged"] == SAMPLES and done["origin_reads"] == SAMPLES, done
    store.stop()


def test_lazy_prefetch_fills_the_rest_without_reads(ddstage, serve, rows):
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy", "--prefetch")
    deadline = time.monotonic() + 60
    while dataset_status(ddstage, store)["staged"] < SAMPLES:
        assert time.monotonic() < deadline, dataset_status(ddstage, store)
        time.sleep(0.1)
    assert dataset_status(ddstage, store)["origin_reads"] == SAMPLES
    every = f"0-{SAMPLES - 1}"
    assert read_store(ddstage, store.dir, "rows", every) == read_bytes(ddstage, rows, every)
    assert dataset_status(ddstage, store)["origin_reads"] == SAMPLES
    store.stop()


def test_lazy_copies_stage_each_sample_once_per_copy(ddstage, serve, rows):
    store = serve(3)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy", "--replicas", "2")
    every = f"0-{SAMPLES - 1}"
    for _ in range(2):
        assert read_store(ddstage, store.dir, "rows", every) == read_bytes(ddstage, rows, every)
    d = dataset_status(ddstage, store)
    assert SAMPLES <= d["origin_reads"] <= 2 * SAMPLES, d
    store.stop()


def test_lazy_refuses_a_source_changed_after_flattening(ddstage, serve, rows, tmp_path):
    """The owner checks the sources before each origin read: a changed one fails the read naming
    it (exit 1), stages nothing, and what was staged before still reads."""
    store = serve(1)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy")
    assert read_store(ddstage, store.dir, "rows", "0-9") == read_bytes(ddstage, rows, "0-9")
    before = dataset_status(ddstage, store)
    source = tmp_path / "tree" / "000" / "0000100.bin"
    stamp = source.stat().st_mtime_ns + 5_000_000_000
    os.utime(source, ns=(stamp, stamp))
    proc = ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "100", "-o", tmp_path / "out.bin")
    assert_runtime_error(proc, str(source))
    assert dataset_status(ddstage, store)["origin_reads"] == before["origin_reads"]
    # What was staged before still reads; so does a sample of an unchanged file.
    assert read_store(ddstage, store.dir, "rows", "0-9,101") == read_bytes(ddstage, rows, "0-9,101")
    store.stop()


def test_lazy_staging_survives_its_index_truncated_in_place(ddstage, serve, rows, tmp_path):
    """index.bin truncated in place under a lazily loaded dataset (what `cp new/index.bin
    old/` does): a read either stages on, byte-exact (the staging ranks hold their own copy of
    the index, so they cannot die of SIGBUS with every dataset they hold, issue 28), or is
    refused naming the damaged index; every rank lives on and another dataset reads on."""
    store = serve(2)
    other = flatten(ddstage, tmp_path / "other.ddx", tmp_path / "tree")
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy")
    ddstage.ok("load", "--store", store.dir, other, "--name", "other")
    pids = store.pids()
    assert read_store(ddstage, store.dir, "rows", "0") == read_bytes(ddstage, rows, "0")
    expected = read_bytes(ddstage, rows, f"0-{SAMPLES - 1}")
    rest = read_bytes(ddstage, rows, f"1-{SAMPLES - 1}")
    index_bin = rows / "index.bin"
    with open(index_bin, "r+b") as f:
        f.truncate(index_bin.stat().st_size // 2)
    proc = ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", f"1-{SAMPLES - 1}",
                       "-o", tmp_path / "out.bin")
    if proc.returncode == 0:
        assert (tmp_path / "out.bin").read_bytes() == rest
    else:
        assert_runtime_error(proc, str(index_bin.parent))
    assert all(pid_alive(p) for p in pids), store.output()
    assert read_store(ddstage, store.dir, "other", f"0-{SAMPLES - 1}") == expected
    assert dataset_status(ddstage, store)["staged"] >= 1
    store.stop()


def test_lazy_status_is_json_serialisable_and_names_lazy(ddstage, serve, rows):
    store = serve(1)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows", "--lazy")
    text = ddstage.ok("status", "--store", store.dir).stdout
    assert "lazy" in text
    json.dumps(status(ddstage, store.dir))
    store.stop()
