"""`ddstage bench`: runs on small data, prints its table, writes JSON that parses and is
self-consistent (no mismatches, ordered percentiles, byte counts that match the data).
No speed is ever asserted."""
import json

import numpy as np
import pytest

from conftest import (assert_runtime_error, assert_usage_error, flatten, info_json)
from test_store import serve  # noqa: F401  (fixture: real served stores)

SAMPLES = 200


def bench_origin(ddstage, ddx, out_json, *extra):
    proc = ddstage.ok("bench", "origin", ddx, "--samples", SAMPLES, "--json", out_json, *extra)
    return proc.stdout, json.loads(out_json.read_text())


def check_modes(result, modes):
    """The JSON lists exactly these modes, each with SAMPLES samples, no mismatches, ordered
    percentiles; all modes read the same bytes."""
    assert result["bench"] == "origin" and result["samples"] == SAMPLES
    assert [m["mode"] for m in result["modes"]] == modes
    for m in result["modes"]:
        assert m["mismatches"] == 0, m
        assert 0 <= m["p50_us"] <= m["p99_us"] <= m["p999_us"] <= m["max_us"], m
        assert m["seconds"] >= 0 and m["mean_us"] >= 0
    assert len({m["bytes"] for m in result["modes"]}) == 1


def sample_bytes_bounds(ddstage, ddx):
    """(min, max) bytes of one sample (all fields) from info --json."""
    fields = info_json(ddstage, ddx)["fields"]
    return sum(f["min_row_bytes"] for f in fields), sum(f["max_row_bytes"] for f in fields)


@pytest.mark.parametrize("storage", [[], ["--deflate"]], ids=["contiguous", "deflate"])
def test_bench_origin_groups(ddstage, gen, tmp_path, storage):
    """Groups per sample (in place, or deflated so packed): both modes, in the table and the
    JSON; bytes consistent with the samples' sizes."""
    src = tmp_path / "g.h5"
    gen.ok("hdf5-groups", src, "--samples", 300, "--min-bytes", 16, "--max-bytes", 512, *storage)
    ddx = flatten(ddstage, tmp_path / "g.ddx", src, "--groups", "/samples/*")
    stdout, result = bench_origin(ddstage, ddx, tmp_path / "out.json")
    assert "index+pread" in stdout and "hdf5-api" in stdout and "ratio" in stdout
    check_modes(result, ["index+pread", "hdf5-api"])
    lo, hi = sample_bytes_bounds(ddstage, ddx)
    assert SAMPLES * lo <= result["modes"][0]["bytes"] <= SAMPLES * hi
    assert result["ratio_mean"] > 0
    # The same seed picks the same samples.
    _, again = bench_origin(ddstage, ddx, tmp_path / "again.json", "--seed", "1")
    assert again["modes"][0]["bytes"] == result["modes"][0]["bytes"]


def test_bench_origin_rows(ddstage, gen, tmp_path):
    """Contiguous rows: both modes; with fixed-size rows the bytes are exactly SAMPLES x the
    bytes of one sample (features float32[4] + labels int64)."""
    src = tmp_path / "rows.h5"
    gen.ok("hdf5-rows", src, "--samples", 500, "--shape", "4")
    ddx = flatten(ddstage, tmp_path / "rows.ddx", src, "--field", "/features", "--field", "/labels")
    stdout, result = bench_origin(ddstage, ddx, tmp_path / "out.json", "--seed", "9")
    check_modes(result, ["index+pread", "hdf5-api"])
    assert result["modes"][0]["bytes"] == SAMPLES * (4 * 4 + 8)
    assert result["fields"] == 2 and result["format"] == "hdf5"


def test_bench_origin_npy(ddstage, tmp_path):
    """An npy dataset has no HDF5 baseline: only index+pread, in table and JSON."""
    np.save(tmp_path / "a.npy", np.zeros((100, 6), np.float64))
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    stdout, result = bench_origin(ddstage, ddx, tmp_path / "out.json")
    assert "index+pread" in stdout and "hdf5-api" not in stdout
    check_modes(result, ["index+pread"])
    assert result["modes"][0]["bytes"] == SAMPLES * 48
    assert "ratio_mean" not in result


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_bench_origin_bad_samples(ddstage, tmp_path, value):
    """--samples must be a positive count: exit 2 naming --samples, no JSON written (a
    negative count must not wrap around into an enormous allocation)."""
    np.save(tmp_path / "a.npy", np.zeros(10, np.int8))
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    proc = ddstage.run("bench", "origin", ddx, "--samples", value, "--json", tmp_path / "o.json")
    assert_usage_error(proc, "--samples")
    assert not (tmp_path / "o.json").exists()


def test_bench_origin_stale(ddstage, tmp_path):
    """A changed source: bench origin refuses it like read does (exit 1 naming it)."""
    np.save(tmp_path / "a.npy", np.zeros(10, np.int8))
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    with open(tmp_path / "a.npy", "ab") as f:
        f.write(b"\0")
    assert_runtime_error(ddstage.run("bench", "origin", ddx, "--samples", 5), "a.npy")
    ddstage.ok("bench", "origin", ddx, "--samples", 5, "--allow-stale")


def make_tree(root, count=40):
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 2000, count)
    for i, s in enumerate(sizes):
        p = root / f"{i % 3}" / f"{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.integers(0, 256, int(s), dtype=np.uint8).tobytes())
    return count, int(sizes.sum())


@pytest.mark.parametrize("pack", [True, False], ids=["pack", "in-place"])
def test_bench_flatten_files(ddstage, tmp_path, pack):
    """bench flatten on a file tree: JSON parses; cat read every source byte and flatten
    indexed every sample byte (cat_bytes, flatten_bytes > 0 and equal to the tree's size);
    the throw-away index is removed from --work-dir."""
    root = tmp_path / "tree"
    count, total = make_tree(root)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "bf.json"
    proc = ddstage.ok("bench", "flatten", root, *(["--pack"] if pack else []), "--work-dir", work,
                      "--json", out)
    result = json.loads(out.read_text())
    assert "cat" in proc.stdout and "flatten" in proc.stdout
    assert result["bench"] == "flatten" and result["format"] == "files"
    assert result["samples"] == count
    assert result["cat_bytes"] > 0 and result["flatten_bytes"] > 0
    assert result["cat_bytes"] == total
    assert result["flatten_bytes"] == total
    assert result["packed_bytes"] == (total if pack else 0)
    assert result["ratio_vs_cat"] is not None and result["ratio_vs_cat"] > 0
    assert list(work.iterdir()) == []


def test_bench_flatten_hdf5(ddstage, gen, tmp_path):
    """bench flatten takes flatten's source options: an HDF5 rows file, cat reads the file."""
    src = tmp_path / "rows.h5"
    gen.ok("hdf5-rows", src, "--samples", 100, "--shape", "8")
    out = tmp_path / "bf.json"
    ddstage.ok("bench", "flatten", src, "--field", "/features", "--field", "/labels", "--work-dir", tmp_path,
               "--json", out)
    result = json.loads(out.read_text())
    assert result["format"] == "hdf5" and result["samples"] == 100
    assert result["cat_bytes"] == src.stat().st_size
    assert result["flatten_bytes"] == 100 * (8 * 4 + 8)


def test_bench_flatten_bad_input(ddstage, tmp_path):
    """Bad sources fail bench flatten as they fail flatten (exit 2), leaving no work dir."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "empty").mkdir()
    assert_usage_error(ddstage.run("bench", "flatten", tmp_path / "empty", "--work-dir", work), "empty")
    assert list(work.iterdir()) == []


# ---- bench loader ---------------------------------------------------------------------------

LOADER = ["--batch", 8, "--compute-ms", 1, "--steps", 20]  # 120 samples: 15 steps an epoch, 2 epochs


def bench_loader(ddstage, out_json, *args):
    proc = ddstage.ok("bench", "loader", *LOADER, *args, "--json", out_json)
    return proc.stdout, json.loads(out_json.read_text())


def check_loader(result, modes, batch=8, steps=20):
    """Every requested mode present in order, each with the requested steps and their samples,
    no mismatched row, ordered wait percentiles, stall fractions in [0, 1]; every available mode
    read the same bytes (the same ids)."""
    assert result["bench"] == "loader" and result["batch"] == batch and result["steps"] == steps
    assert [m["mode"] for m in result["modes"]] == modes
    ran = [m for m in result["modes"] if m["available"]]
    for m in ran:
        assert m["steps"] == steps and m["samples"] == steps * batch, m
        assert m["mismatches"] == 0, m
        assert 0 <= m["wait_min_ms"] <= m["wait_p50_ms"] <= m["wait_p99_ms"] <= m["wait_p999_ms"] \
            <= m["wait_max_ms"], m
        assert m["wait_min_ms"] <= m["wait_mean_ms"] <= m["wait_max_ms"], m
        assert 0 <= m["waits_over_1s"] <= m["waits_over_100ms"] <= 1, m
        # Every step sleeps its compute time after its batch arrives.
        assert m["seconds"] >= steps * result["compute_ms"] / 1000 and m["samples_per_s"] > 0, m
        assert m["wait_seconds"] <= m["seconds"]
    assert len({m["bytes"] for m in ran}) == min(len(ran), 1)
    return {m["mode"]: m for m in result["modes"]}


@pytest.fixture(scope="module")
def loader_data(ddstage, gen, tmp_path_factory):
    """An HDF5 rows dataset (x: 256-byte rows, y: labels) and a tree of variable-size files,
    120 samples each, shared by the loader tests (which only read them)."""
    tmp_path = tmp_path_factory.mktemp("loader-data")
    gen.ok("hdf5-rows", tmp_path / "rows.h5", "--samples", 120, "--shape", 64, "--dtype", "float32")
    rows = flatten(ddstage, tmp_path / "rows.ddx", tmp_path / "rows.h5", "--field", "x=/features",
                   "--field", "y=/labels")
    gen.ok("files", tmp_path / "tree", "--samples", 120, "--min-bytes", 1, "--max-bytes", 5000)
    return {"rows": rows, "files": flatten(ddstage, tmp_path / "files.ddx", tmp_path / "tree")}


def test_bench_loader_store_vs_origin(ddstage, serve, loader_data, tmp_path):
    """A served HDF5 dataset: store, origin and hdf5 modes over two epochs, all fields by
    default; the table names each mode and says origin was read cold; ratios vs the store."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, loader_data["rows"], "--name", "rows")
    stdout, result = bench_loader(ddstage, tmp_path / "l.json", "--store", store.dir, "--dataset", "rows",
                                  "--compare", "origin,hdf5", "--prefetch", 2, "--threads", 2)
    modes = check_loader(result, ["store", "origin", "hdf5"])
    assert result["fields"] == ["x", "y"] and result["steps_per_epoch"] == 15 and result["origin_cold"]
    assert modes["store"]["bytes"] == 20 * 8 * (64 * 4 + 8)
    assert [r["mode"] for r in result["ratios_vs_store"]] == ["origin", "hdf5"]
    assert all(r["epoch"] > 0 and r["wait_p99"] > 0 for r in result["ratios_vs_store"])
    for word in ("store", "origin", "hdf5", "cold", "vs store", ">1s"):
        assert word in stdout, word
    # One field, read warm.
    stdout, result = bench_loader(ddstage, tmp_path / "x.json", "--store", store.dir, "--dataset", "rows",
                                  "--field", "y", "--compare", "origin", "--warm")
    modes = check_loader(result, ["store", "origin"])
    assert result["fields"] == ["y"] and not result["origin_cold"] and "warm" in stdout
    assert modes["origin"]["bytes"] == 20 * 8 * 8
    store.stop()


def test_bench_loader_files_source(ddstage, serve, loader_data, tmp_path):
    """Not an HDF5 source: hdf5 is n/a (table and JSON), store and origin read the same
    variable-size rows. A dataset the store does not hold is a usage error naming it."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, loader_data["files"], "--name", "files")
    stdout, result = bench_loader(ddstage, tmp_path / "l.json", "--store", store.dir, "--dataset", "files",
                                  "--compare", "origin,hdf5", "--threads", 1, "--prefetch", 1)
    modes = check_loader(result, ["store", "origin", "hdf5"])
    assert modes["hdf5"] == {"mode": "hdf5", "available": False, "reason": "not an HDF5 source"}
    assert "n/a: not an HDF5 source" in stdout
    proc = ddstage.run("bench", "loader", *LOADER, "--store", store.dir, "--dataset", "nope")
    assert_usage_error(proc, "nope")
    store.stop()


def test_bench_loader_index_only(ddstage, loader_data, tmp_path):
    """Without a store, --index runs the origin modes (both by default), with no ratios."""
    _, result = bench_loader(ddstage, tmp_path / "l.json", "--index", loader_data["rows"])
    check_loader(result, ["origin", "hdf5"])
    assert result["ratios_vs_store"] == []
    _, result = bench_loader(ddstage, tmp_path / "f.json", "--index", loader_data["files"], "--compare", "hdf5")
    assert check_loader(result, ["hdf5"])["hdf5"]["available"] is False


@pytest.mark.parametrize("args, words", [
    (["--batch", 0], ["--batch"]),
    (["--batch", 121], ["--batch", "120 samples"]),
    (["--steps", 0], ["--steps"]),
    (["--prefetch", 0], ["--prefetch"]),
    (["--compare", "origin,tape"], ["tape"]),
    (["--field", "z"], ["z"]),
    (["--store", "/nonexistent"], ["--dataset"]),
    ([], ["--index"]),
], ids=["batch-0", "batch-too-big", "steps-0", "prefetch-0", "unknown-mode", "unknown-field",
        "missing-dataset", "no-source"])
def test_bench_loader_bad_input(ddstage, loader_data, tmp_path, args, words):
    """Bad input: exit 2, one line naming the problem, no JSON written."""
    index = [] if args and args[0] == "--store" or not args else ["--index", loader_data["rows"]]
    out = tmp_path / "l.json"
    proc = ddstage.run("bench", "loader", "--compute-ms", 1, "--steps", 2, *index, *args, "--json", out)
    assert_usage_error(proc, *words)
    assert not out.exists()
