"""`ddstage bench`: runs on small data, prints its table, writes JSON that parses and is
self-consistent (no mismatches, ordered percentiles, byte counts that match the data).
No speed is ever asserted."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import (assert_runtime_error, assert_usage_error, flatten, info_json, skip_if_sanitized)
from test_store import serve  # noqa: F401  (fixture: real served stores)

SAMPLES = 200
SCHEMA = "ddstage-bench/2"  # every bench JSON's, as man ddstage-bench documents it


def bench_origin(ddstage, ddx, out_json, *extra):
    proc = ddstage.ok("bench", "origin", ddx, "--samples", SAMPLES, "--json", out_json, *extra)
    return proc.stdout, json.loads(out_json.read_text())


def check_modes(result, modes):
    """The report lists exactly these modes, each with SAMPLES samples, no mismatches, ordered
    percentiles; all modes read the same bytes."""
    assert result["schema"] == SCHEMA and result["bench"] == "origin" and result["unit"] == "sample"
    assert [c["dims"]["mode"] for c in result["cells"]] == modes
    for c in result["cells"]:
        assert c["rows"] == SAMPLES and c["calls"] == SAMPLES, c
        assert c["mismatches"] == 0, c
        assert 0 <= c["min_us"] <= c["p50_us"] <= c["p99_us"] <= c["p999_us"] <= c["max_us"], c
        assert c["seconds"] >= 0 and c["mean_us"] >= 0
    assert len({c["bytes"] for c in result["cells"]}) == 1
    return result["cells"]


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
    cells = check_modes(result, ["index+pread", "hdf5-api"])
    lo, hi = sample_bytes_bounds(ddstage, ddx)
    assert SAMPLES * lo <= cells[0]["bytes"] <= SAMPLES * hi
    assert len(result["notes"]) == 1 and "ratio" in result["notes"][0]
    # The same seed picks the same samples.
    _, again = bench_origin(ddstage, ddx, tmp_path / "again.json", "--seed", "1")
    assert again["cells"][0]["bytes"] == cells[0]["bytes"]


def test_bench_origin_rows(ddstage, gen, tmp_path):
    """Contiguous rows: both modes; with fixed-size rows the bytes are exactly SAMPLES x the
    bytes of one sample (features float32[4] + labels int64)."""
    src = tmp_path / "rows.h5"
    gen.ok("hdf5-rows", src, "--samples", 500, "--shape", "4")
    ddx = flatten(ddstage, tmp_path / "rows.ddx", src, "--field", "/features", "--field", "/labels")
    stdout, result = bench_origin(ddstage, ddx, tmp_path / "out.json", "--seed", "9")
    cells = check_modes(result, ["index+pread", "hdf5-api"])
    assert cells[0]["bytes"] == SAMPLES * (4 * 4 + 8)
    assert "2 fields, format hdf5" in result["run"]["dataset"]


def test_bench_origin_npy(ddstage, tmp_path):
    """An npy dataset has no HDF5 baseline: only index+pread is measured; hdf5-api is n/a."""
    np.save(tmp_path / "a.npy", np.zeros((100, 6), np.float64))
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    stdout, result = bench_origin(ddstage, ddx, tmp_path / "out.json")
    assert "index+pread" in stdout and "hdf5-api: n/a: not an HDF5 source (npy)" in stdout
    cells = check_modes(result, ["index+pread"])
    assert cells[0]["bytes"] == SAMPLES * 48
    assert result["notes"] == [] and result["run"]["hdf5-api"].startswith("n/a")


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
    assert result["schema"] == SCHEMA and result["bench"] == "flatten" and result["format"] == "files"
    assert result["samples"] == count
    assert result["cat_bytes"] > 0 and result["flatten_bytes"] > 0
    assert result["cat_bytes"] == total
    assert result["flatten_bytes"] == total
    assert result["packed_bytes"] == (total if pack else 0)
    assert result["ratio_vs_cat"] == pytest.approx(result["cat_seconds"] / result["flatten_seconds"], rel=1e-3)
    assert "file bytes" in proc.stdout and "sample bytes" in proc.stdout
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


def test_bench_flatten_compressed_counts_file_and_sample_bytes_apart(ddstage, gen, tmp_path):
    """A deflated HDF5 source: cat reads the file as stored, flatten decodes sample bytes of
    another count from it; the ratio is of the two steps' times over the same file (its bytes
    per second), never decoded bytes against stored ones."""
    src = tmp_path / "z.h5"
    gen.ok("hdf5-rows", src, "--samples", 2000, "--shape", 64, "--dtype", "int32", "--deflate")
    out = tmp_path / "bf.json"
    proc = ddstage.ok("bench", "flatten", src, "--field", "/features", "--work-dir", tmp_path, "--json", out)
    result = json.loads(out.read_text())
    assert result["cat_bytes"] == src.stat().st_size
    assert result["flatten_bytes"] == result["packed_bytes"] == 2000 * 64 * 4 != result["cat_bytes"]
    assert result["ratio_vs_cat"] == pytest.approx(result["cat_seconds"] / result["flatten_seconds"], rel=1e-3)
    assert result["flatten_file_mb_per_s"] == pytest.approx(
        result["cat_bytes"] / result["flatten_seconds"] / 1e6, rel=1e-3)
    assert result["flatten_sample_mb_per_s"] == pytest.approx(
        result["flatten_bytes"] / result["flatten_seconds"] / 1e6, rel=1e-3)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("flatten --pack"))
    assert str(result["cat_bytes"]) in row.split() and str(result["flatten_bytes"]) in row.split()


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


def check_loader(result, modes, unavailable=(), batch=8, epochs=((1, 15), (2, 5))):
    """Every requested mode is a cell per epoch ((epoch, steps): 20 steps of 15 an epoch by
    default), in order, or, when it cannot run, an n/a line of the run's description. Each cell
    ran its epoch's steps of `batch` samples with no mismatched row, ordered wait percentiles,
    stall fractions in [0, 1], a first step no later than its epoch's end; every mode read the
    same bytes per epoch (the same ids). Returns {mode: {epoch: cell}}."""
    assert result["schema"] == SCHEMA and result["bench"] == "loader" and result["unit"] == "step"
    cells = {}
    for c in result["cells"]:
        cells.setdefault(c["dims"]["mode"], {})[c["dims"]["epoch"]] = c
    assert list(cells) == modes
    for mode in unavailable:
        assert result["run"][mode].startswith("n/a: "), result["run"]
    for by_epoch in cells.values():
        assert list(by_epoch) == [str(e) for e, _ in epochs]
        for (_, steps), c in zip(epochs, by_epoch.values()):
            assert c["calls"] == steps and c["rows"] == steps * batch, c
            assert c["mismatches"] == 0, c
            assert 0 <= c["min_us"] <= c["p50_us"] <= c["p99_us"] <= c["p999_us"] <= c["max_us"], c
            assert c["min_us"] <= c["mean_us"] <= c["max_us"], c
            assert 0 <= c["over_1s"] <= c["over_100ms"] <= 1, c
            # Every step sleeps its compute time (1 ms) after its batch arrives.
            assert c["seconds"] >= steps * 0.001 and c["samples_per_s"] > 0 and c["epoch_s"] > 0, c
            assert 0 <= c["first_step_s"] <= c["seconds"], c
    for e, _ in epochs:
        assert len({by_epoch[str(e)]["bytes"] for by_epoch in cells.values()}) == min(len(cells), 1)
    return cells


def total(cells, figure):
    return sum(c[figure] for c in cells.values())


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
    default; origin read cold; each origin mode's ratios to the store in its cell and a note."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, loader_data["rows"], "--name", "rows")
    stdout, result = bench_loader(ddstage, tmp_path / "l.json", "--store", store.dir, "--dataset", "rows",
                                  "--compare", "origin,hdf5", "--prefetch", 2, "--threads", 2)
    cells = check_loader(result, ["store", "origin", "hdf5"])
    run = result["run"]
    assert run["dataset"].endswith("fields x,y") and "1.33 epochs of 15" in run["loop"]
    assert run["origin files"].startswith("read cold")
    assert total(cells["store"], "bytes") == 20 * 8 * (64 * 4 + 8)
    assert not any("epoch_vs_store" in c or "staging_s" in c for c in cells["store"].values())
    assert all(c["epoch_vs_store"] > 0 and c["p99_vs_store"] > 0
               for m in ("origin", "hdf5") for c in cells[m].values())
    assert [n.split(", epoch")[0] for n in result["notes"]] == ["origin vs store"] * 2 + ["hdf5 vs store"] * 2
    for word in ("store", "origin", "hdf5", "read cold", "vs store", "over_1s", "first_step_s", "epoch"):
        assert word in stdout, word
    # One field, read warm.
    stdout, result = bench_loader(ddstage, tmp_path / "x.json", "--store", store.dir, "--dataset", "rows",
                                  "--field", "y", "--compare", "origin", "--warm")
    cells = check_loader(result, ["store", "origin"])
    assert result["run"]["dataset"].endswith("fields y") and "read warm" in stdout
    assert total(cells["origin"], "bytes") == 20 * 8 * 8
    store.stop()


def test_bench_loader_files_source(ddstage, serve, loader_data, tmp_path):
    """Not an HDF5 source: hdf5 is n/a (table and JSON), store and origin read the same
    variable-size rows. A dataset the store does not hold is a usage error naming it."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, loader_data["files"], "--name", "files")
    stdout, result = bench_loader(ddstage, tmp_path / "l.json", "--store", store.dir, "--dataset", "files",
                                  "--compare", "origin,hdf5", "--threads", 1, "--prefetch", 1)
    check_loader(result, ["store", "origin"], unavailable=["hdf5"])
    assert result["run"]["hdf5"] == "n/a: not an HDF5 source"
    assert "hdf5: n/a: not an HDF5 source" in stdout
    proc = ddstage.run("bench", "loader", *LOADER, "--store", store.dir, "--dataset", "nope")
    assert_usage_error(proc, "nope")
    store.stop()


def test_bench_loader_full_and_lazy(ddstage, serve, loader_data, tmp_path):
    """full and lazy load the dataset's index under names of their own, train from it, and
    unload it. full's epoch 1 waits for the load (staging_s, in its first step and epoch);
    against the store, per epoch. lazy runs where the server stages lazily (then the acceptance
    line: lazy epoch 2 vs full) and is otherwise a `lazy: n/a: why` line. bench failover refuses
    a dataset held once."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, loader_data["rows"], "--name", "rows")
    stdout, result = bench_loader(ddstage, tmp_path / "l.json", "--store", store.dir, "--dataset", "rows",
                                  "--compare", "full,lazy")
    lazy_ran = any(c["dims"]["mode"] == "lazy" for c in result["cells"])
    cells = check_loader(result, ["store", "full", "lazy"] if lazy_ran else ["store", "full"],
                         unavailable=[] if lazy_ran else ["lazy"])
    for mode in cells:
        if mode == "store":
            continue
        first, second = cells[mode]["1"], cells[mode]["2"]
        assert first["staging_s"] > 0 and first["first_step_s"] >= first["staging_s"], first
        assert first["epoch_s"] >= first["staging_s"] and second["staging_s"] == 0, (first, second)
        assert first["epoch_vs_store"] > 0 and second["p99_vs_store"] > 0
    acceptance = [n for n in result["notes"] if n.startswith("lazy epoch 2 vs the full store (full)")]
    if lazy_ran:
        assert len(acceptance) == 1 and "mean" in acceptance[0], result["notes"]
    else:
        assert acceptance == [] and "lazy: n/a: " in stdout, stdout
        assert result["run"]["lazy"] in stdout
    descriptor = yaml.safe_load((Path(store.dir) / "store.yaml").read_text())
    assert [d["name"] for d in descriptor.get("datasets") or []] == ["rows"]
    proc = ddstage.run("bench", "failover", "--store", store.dir, "--dataset", "rows")
    assert_usage_error(proc, "held once", "--replicas")
    store.stop()


def test_bench_loader_index_only(ddstage, loader_data, tmp_path):
    """Without a store, --index runs the origin modes (both by default), with no ratios; the
    CSV has a line per mode; the plot is drawn, or refused up front without gnuplot."""
    csv, plot = tmp_path / "l.csv", tmp_path / "l.svg"
    proc = ddstage.run("bench", "loader", *LOADER, "--index", loader_data["rows"], "--json", tmp_path / "l.json",
                       "--csv", csv, "--plot", plot)
    if shutil.which("gnuplot") is None:
        assert_usage_error(proc, "gnuplot")
        return
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "l.json").read_text())
    check_loader(result, ["origin", "hdf5"])
    assert result["notes"] == []
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("mode,epoch,rows,bytes")
    assert [l.split(",")[:2] for l in lines[1:]] == [[m, e] for m in ("origin", "hdf5") for e in ("1", "2")]
    assert "<svg" in plot.read_text()
    _, result = bench_loader(ddstage, tmp_path / "f.json", "--index", loader_data["files"], "--compare", "hdf5")
    check_loader(result, [], unavailable=["hdf5"])


@pytest.mark.parametrize("args, words", [
    (["--batch", 0], ["--batch"]),
    (["--batch", 121], ["--batch", "120 samples"]),
    (["--steps", 0], ["--steps"]),
    (["--prefetch", 0], ["--prefetch"]),
    (["--compare", "origin,tape"], ["tape"]),
    (["--compare", "lazy"], ["lazy", "--store"]),
    (["--field", "z"], ["z"]),
    (["--store", "/nonexistent"], ["--dataset"]),
    ([], ["--index"]),
    (["--plot", "out.txt"], [".png or .svg"]),
], ids=["batch-0", "batch-too-big", "steps-0", "prefetch-0", "unknown-mode", "staged-without-store", "unknown-field",
        "missing-dataset", "no-source", "plot-format"])
def test_bench_loader_bad_input(ddstage, loader_data, tmp_path, args, words):
    """Bad input: exit 2, one line naming the problem, no JSON written."""
    index = [] if args and args[0] == "--store" or not args else ["--index", loader_data["rows"]]
    out = tmp_path / "l.json"
    proc = ddstage.run("bench", "loader", "--compute-ms", 1, "--steps", 2, *index, *args, "--json", out)
    assert_usage_error(proc, *words)
    assert not out.exists()


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from local_mpi import MPI_ENV  # noqa: E402

FABRIC_LO = {"DDSTAGE_FABRIC_PROVIDER": "tcp", "DDSTAGE_FABRIC_DOMAIN": "lo", "FI_TCP_IFACE": "lo"}
STORE_DIMS = ("transport", "mode", "row_bytes", "batch", "threads", "sharing")


def cell_key(c):
    return tuple(c["dims"][k] for k in STORE_DIMS)


def check_store_cells(report, ways, sizes, batches, threads, sharing, rows, peer=None):
    """Exactly the requested matrix (collectives with one thread only) plus one memcpy floor per
    row size and batch; with a peer (a remote rank), per fabric way, row size and batch the raw
    floor against it and get_batch of its rows only, the latter with x_raw (and only it), in
    whole batches (every call reads a batch; a note where the rows are fewer than one). Per
    cell bytes == rows x row_bytes and ordered percentiles."""
    assert report["schema"] == SCHEMA
    modes = {"mpi-alltoall": "get_batch_collective"}
    expected = {("memcpy", "floor", s, b, 1, "own") for s in sizes for b in batches}
    expected |= {(w, modes.get(w, "get_batch"), s, b, t, sh) for w in ways for s in sizes for b in batches
                 for t in threads for sh in sharing if t == 1 or w != "mpi-alltoall"}
    fabric = [w for w in ways if w.startswith("fabric")] if peer else []
    paired = {(name, mode, s, b, 1, "own") for w in fabric for s in sizes for b in batches if b <= rows
              for name, mode in (("fabric-raw" + w[len("fabric"):], "floor"), (w, "get_batch"))}
    matrix = [c for c in report["cells"] if "profile" not in c["dims"] and "peer" not in c["dims"]]
    peered = [c for c in report["cells"] if "peer" in c["dims"]]
    assert sorted(map(cell_key, matrix)) == sorted(expected)
    assert sorted(map(cell_key, peered)) == sorted(paired)
    for c in matrix + peered:
        whole = rows // c["dims"]["batch"] * c["dims"]["batch"] if c in peered else rows
        assert c["rows"] == whole and c["bytes"] == whole * c["dims"]["row_bytes"], c
        assert c["calls"] >= rows // c["dims"]["batch"]
        assert 0 <= c["p50_us"] <= c["p99_us"] <= c["p999_us"] <= c["max_us"], c
        assert c["gb_per_s"] > 0 and c["seconds"] > 0
        floor = c["dims"]["mode"] == "floor"
        assert ("x_floor" in c) == (not floor and c in matrix), c
        assert ("x_raw" in c) == ("x_raw_p50" in c) == (not floor and c in peered), c
    for c in peered:
        assert c["dims"]["peer"] == peer and c.get("x_raw", 1) > 0 and c.get("x_raw_p50", 1) > 0, c
        assert ("provider" in c["dims"]) == (c["dims"]["mode"] == "floor"), c
        assert c["calls"] == c["rows"] // c["dims"]["batch"], c
    assert any(n.startswith("x_raw: ") for n in report["notes"]) == bool(peered)
    for b in batches:
        assert any(n.startswith("no x_raw at ") and f" batch {b}: " in n
                   for n in report["notes"]) == (bool(fabric) and b > rows), b


def test_bench_store_synthetic_one_process(ddstage, tmp_path):
    """Embedded, one process (an MPI singleton): generated 3K and 12.5K rows, every cell of the
    matrix in the table, JSON, CSV (header + one line per cell) and a PNG plot."""
    out = tmp_path / "s.json"
    proc = ddstage.ok("bench", "store", "--synthetic", "3K,12.5K", "--synthetic-rows", 64, "--samples", 32,
                      "--transport", "shm,mpi,mpi-alltoall", "--batch", "1,8", "--threads", "1,2",
                      "--sharing", "own,shared", "--json", out, "--csv", tmp_path / "s.csv",
                      "--plot", tmp_path / "s.png", env=MPI_ENV)
    report = json.loads(out.read_text())
    assert report["bench"] == "store" and report["run"]["ranks"].startswith("1 ")
    check_store_cells(report, ["shm", "mpi", "mpi-alltoall"], [3072, 12800], [1, 8], [1, 2], ["own", "shared"], 32)
    assert "get_batch_collective" in proc.stdout and "12800" in proc.stdout
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert lines[0].split(",")[:len(STORE_DIMS)] == list(STORE_DIMS)
    assert len(lines) == 1 + len(report["cells"])
    png = (tmp_path / "s.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert not list(tmp_path.glob("*.tmp"))


def test_bench_store_embedded_mpiexec(ddstage, tmp_path):
    """Embedded under mpiexec -n 2: shm, mpi, mpi-alltoall and fabric over tcp on lo; rank 0
    alone reports; the temporary datasets are removed."""
    out = tmp_path / "m.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = ddstage.run("bench", "store", "--synthetic", "3K", "--synthetic-rows", 128, "--samples", 48,
                       "--transport", "shm,mpi,mpi-alltoall,fabric:tcp", "--batch", "1,16", "--threads", "1,2",
                       "--json", out, "--csv", tmp_path / "m.csv", check=True,
                       prefix=["timeout", "120", "mpiexec", "-n", "2"], env={**MPI_ENV, **FABRIC_LO, "TMPDIR": str(tmp)})
    report = json.loads(out.read_text())
    assert report["run"]["ranks"] == "2" and "rank 0" in report["run"]["figures"]
    check_store_cells(report, ["shm", "mpi", "mpi-alltoall", "fabric:tcp"], [3072], [1, 16], [1, 2], ["own"], 48,
                      peer="rank 1")
    assert proc.stdout.count("latencies in") == 1
    assert list(tmp.iterdir()) == []


def test_bench_store_served_fabric_pairs_with_the_stores_region(ddstage, serve, loader_data, tmp_path):
    """Served over libfabric (tcp on lo): the raw floor reads the store's own registration of
    the dataset on its largest rank (store.yaml's key and base), and get_batch of that rank's
    rows only carries x_raw against it, per batch, in whole batches (44 rows: 40 at batch 8,
    none at batch 64); the matrix cells have none. A shm way gets no pair."""
    store = serve(ranks=2, args=["--transport", "fabric"], env=FABRIC_LO)
    ddstage.ok("load", "--store", store.dir, loader_data["rows"], "--name", "rows", env=FABRIC_LO)
    out = tmp_path / "f.json"
    ddstage.ok("bench", "store", "--store", store.dir, "--dataset", "rows", "--field", "x", "--transport",
               "shm,fabric:tcp", "--batch", "1,8,64", "--samples", 44, "--json", out, env=FABRIC_LO)
    loaded = yaml.safe_load((store.dir / "store.yaml").read_text())["datasets"][0]
    largest = max(loaded["regions"], key=lambda g: (g["bytes"], -g["rank"]))["rank"]
    check_store_cells(json.loads(out.read_text()), ["shm", "fabric:tcp"], [256], [1, 8, 64], [1], ["own"], 44,
                      peer=f"rank {largest}")
    store.stop()


def test_bench_store_embedded_bad_tmpdir(ddstage, tmp_path):
    """Under mpiexec -n 2, a TMPDIR that is no directory fails on rank 0 alone: every rank ends
    (none left waiting for rank 0's broadcast) with the error naming the directory."""
    missing = tmp_path / "missing"
    # OpenMPI would create a missing TMPDIR for its session directory: give it its own.
    env = {**MPI_ENV, "TMPDIR": str(missing), "OMPI_MCA_orte_tmpdir_base": str(tmp_path)}
    proc = ddstage.run("bench", "store", "--synthetic", "3K", "--synthetic-rows", 16, "--samples", 8,
                       "--transport", "shm", prefix=["timeout", "60", "mpiexec", "-n", "2"], env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("ddstage: error:")]
    assert errors and all(str(missing) in l for l in errors), proc.stderr
    assert not missing.exists()


@pytest.mark.parametrize("args, words", [
    (["--synthetic", "3K", "--transport", "carrier-pigeon"], ["carrier-pigeon"]),
    (["--synthetic", "3K", "--batch", "0"], ["--batch"]),
    (["--synthetic", "3K", "--threads", "0"], ["--threads"]),
    (["--synthetic", "3K", "--sharing", "everyone"], ["--sharing"]),
    (["--synthetic", "3Q"], ["3Q"]),
    (["--synthetic", "3K", "--plot", "out.gif"], [".png or .svg"]),
    (["--synthetic", "3K", "--store", "somewhere", "--dataset", "d"], ["not both"]),
    (["--store", "somewhere", "--dataset", "d", "--transport", "pigeon"], ["'pigeon'", "auto|shm|fabric"]),
    (["--store", "somewhere", "--dataset", "d", "--transport", "shm:tcp"], ["shm:tcp", "only fabric"]),
    ([], ["--synthetic"]),
])
def test_bench_store_bad_input(ddstage, tmp_path, args, words):
    """Bad matrix flags fail before MPI starts or anything is measured: exit 2, one line."""
    assert_usage_error(ddstage.run("bench", "store", *args, cwd=tmp_path, env=MPI_ENV), *words)
    assert list(tmp_path.iterdir()) == []


def test_bench_store_unavailable_transport_reads_as_info_says(ddstage, tmp_path):
    """A named way whose transport this node cannot use (libfabric offering no provider) is
    refused, after MPI starts, with the registry's reason: the words `info --settings` says."""
    env = {**MPI_ENV, "FI_PROVIDER": "no-such-provider"}
    lines = ddstage.ok("info", "--settings", env=env).stdout.splitlines()
    row = next(line for line in lines if line.startswith("  fabric "))
    assert row.split()[1] == "unavailable", row
    why = row.split(": ", 1)[1]
    proc = ddstage.run("bench", "store", "--synthetic", "3K", "--synthetic-rows", 16, "--samples", 8,
                       "--transport", "shm,fabric:tcp", cwd=tmp_path, env=env)
    assert_usage_error(proc, "--transport fabric: " + why)
    assert list(tmp_path.iterdir()) == []


def test_bench_store_index(ddstage, tmp_path):
    """Embedded with a real dataset (--index): its row size, one cell per way and batch."""
    np.save(tmp_path / "a.npy", np.arange(600, dtype=np.float64).reshape(100, 6))
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    out = tmp_path / "i.json"
    ddstage.ok("bench", "store", "--index", ddx, "--samples", 40, "--transport", "shm,mpi-alltoall",
               "--batch", "4", "--json", out, env=MPI_ENV)
    report = json.loads(out.read_text())
    assert report["run"]["dataset"] == str(ddx)
    check_store_cells(report, ["shm", "mpi-alltoall"], [48], [4], [1], ["own"], 40)


def check_raw_cells(report, sizes, batches, rows):
    assert report["schema"] == SCHEMA
    cells = {(c["dims"]["row_bytes"], c["dims"]["batch"]) for c in report["cells"]}
    assert cells == {(s, b) for s in sizes for b in batches} and len(report["cells"]) == len(cells)
    for c in report["cells"]:
        assert c["dims"]["transport"] == "fabric-raw" and c["dims"]["provider"] == "tcp;ofi_rxm"
        assert c["rows"] == rows and c["bytes"] == rows * c["dims"]["row_bytes"]
        assert c["calls"] == -(-rows // c["dims"]["batch"])
        assert 0 < c["p50_us"] <= c["p99_us"] <= c["p999_us"] <= c["max_us"], c


def test_bench_fabric_raw(ddstage, tmp_path):
    """The raw fi_read loop over tcp on lo, in one process (a second endpoint of its own) and
    under mpiexec -n 2 (rank 0 reads rank 1): one cell per row size and batch, CSV and JSON."""
    out = tmp_path / "raw.json"
    ddstage.ok("bench", "fabric-raw", "--size", "3K,64K", "--batch", "1,16", "--samples", 40, "--json", out,
               "--csv", tmp_path / "raw.csv", env={**MPI_ENV, **FABRIC_LO})
    report = json.loads(out.read_text())
    assert report["bench"] == "fabric-raw" and "second endpoint" in report["run"]["reads"]
    check_raw_cells(report, [3072, 65536], [1, 16], 40)
    assert len((tmp_path / "raw.csv").read_text().splitlines()) == 1 + 4
    ddstage.run("bench", "fabric-raw", "--size", "3K", "--batch", "8", "--samples", 24, "--json", out, check=True,
                prefix=["timeout", "60", "mpiexec", "-n", "2"], env={**MPI_ENV, **FABRIC_LO})
    report = json.loads(out.read_text())
    assert "rank 1" in report["run"]["reads"]
    check_raw_cells(report, [3072], [8], 24)


@pytest.mark.parametrize("args, words", [
    (["--size", "0"], ["--size"]),
    (["--batch", "0"], ["--batch"]),
    (["--provider", "no-such-provider"], ["no-such-provider"]),
])
def test_bench_fabric_raw_bad_input(ddstage, args, words):
    assert_usage_error(ddstage.run("bench", "fabric-raw", "--samples", 4, *args, env={**MPI_ENV, **FABRIC_LO}), *words)


def test_bench_fabric_raw_target_fails_alone(ddstage):
    """Rank 1 failing to allocate its target (bad_alloc, no ddstage error) still tells rank 0,
    which would otherwise wait for its address forever: both end, rank 0 naming rank 1."""
    skip_if_sanitized(ddstage, "ASan's allocator reports a 16 TiB allocation instead of throwing bad_alloc")
    proc = ddstage.run("bench", "fabric-raw", "--size", "16T", "--batch", 1, "--samples", 1,
                       prefix=["timeout", "60", "mpiexec", "-n", "2"], env={**MPI_ENV, **FABRIC_LO})
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "ddstage: error: rank 1: std::bad_alloc" in proc.stderr


def test_bench_store_profile(ddstage, tmp_path):
    """--profile: every get_batch cell carries the read profile (its batches are the cell's
    calls; the shared reader's lock wait is its queue_wait) in the table and the JSON, and the
    profile's overhead is two extra cells, off and on, with the ratio."""
    out = tmp_path / "p.json"
    proc = ddstage.ok("bench", "store", "--synthetic", "3K", "--synthetic-rows", 64, "--samples", 32,
                      "--transport", "shm", "--batch", "4", "--threads", "2", "--sharing", "own,shared", "--profile",
                      "--json", out, env=MPI_ENV)
    report = json.loads(out.read_text())
    check_store_cells(report, ["shm"], [3072], [4], [2], ["own", "shared"], 32)
    for c in report["cells"]:
        if c["dims"]["mode"] == "floor":
            assert "profile" not in c
        elif "profile" not in c["dims"]:
            assert c["profile"]["get_batch"]["batches"] == c["calls"], c
            assert c["profile"]["copy"]["batches"] == c["calls"]
            assert ("queue_wait" in c["profile"]) == (c["dims"]["sharing"] == "shared")
    off, on = [c for c in report["cells"] if "profile" in c["dims"]]
    assert (off["dims"]["profile"], on["dims"]["profile"]) == ("off", "on")
    assert off["dims"]["batch"] == on["dims"]["batch"] == 128 and off["rows"] == on["rows"] == 6 * 32
    assert on["x_off_min"] > 0 and on["x_off_mean"] > 0
    # A shared window is all memcpy: the stage table shows copies and names the shm path.
    assert "profile overhead" in proc.stdout and "\ncopy " in proc.stdout and "paths: shm" in proc.stdout


# ---- bench control --------------------------------------------------------------------------

def test_bench_control_simulates_tree_and_flat(ddstage, tmp_path):
    """--simulate: each scenario under the leader tree and under today's flat protocol, in
    simulated time; the tree's figures meet the scaling targets, the flat model shows today's
    faults (EMFILE deaths on a status, one loss marked per check), and today's store.yaml is
    measured for the attach baseline."""
    proc = ddstage.ok("bench", "control", "--simulate", 1000, "--json", tmp_path / "c.json")
    result = json.loads((tmp_path / "c.json").read_text())
    assert result["schema"] == SCHEMA and result["bench"] == "control"
    cells = {(c["dims"]["protocol"], c["dims"]["scenario"]): c for c in result["cells"]}
    tree = {s: c for (p, s), c in cells.items() if p == "tree"}
    flat = {s: c for (p, s), c in cells.items() if p == "flat"}
    assert len(tree) == 5 and set(tree) <= set(flat)
    assert all(c["false_deaths"] == 0 for c in tree.values())
    assert tree["status x3"]["command_ms"] < 1000
    assert tree["4 processes end"]["detect_process_s"] <= 1
    assert tree["node 1 dies (a tree leader)"]["detect_node_p99_s"] <= 5
    assert tree["62 nodes die at once"]["detect_node_p99_s"] <= 5
    # 999 ranks to reach, 960 descriptors to reach them with.
    assert flat["status x3"]["false_deaths"] == 39
    assert flat["62 nodes die at once"]["descriptor_updates"] == 62 * 4
    attach = cells[("flat", "attach (today's store.yaml)")]
    assert attach["descriptor_bytes"] > 1000 * 200 and attach["attach_ms"] > 0
    assert "GB/s" not in proc.stdout and "detect_node_p99_s" in proc.stdout


@pytest.mark.parametrize("args,words", [
    ([], ["--simulate", "--store"]),
    (["--simulate", 4], ["--simulate 4", "two nodes"]),
    (["--simulate", 100, "--store", "/nonexistent"], ["one of them"]),
])
def test_bench_control_bad_input(ddstage, args, words):
    assert_usage_error(ddstage.run("bench", "control", *args), *words)


def test_bench_control_measures_the_store_in_hand(ddstage, serve, tmp_path):
    """--store: descriptor size, attach and a status round trip, on a real store."""
    store = serve(ranks=2)
    ddstage.ok("bench", "control", "--store", store.dir, "--json", tmp_path / "s.json")
    [cell] = json.loads((tmp_path / "s.json").read_text())["cells"]
    assert cell["rows"] == 2
    assert cell["descriptor_bytes"] == (Path(store.dir) / "store.yaml").stat().st_size
    assert cell["attach_ms"] > 0 and cell["command_ms"] > 0
