"""--csv and --plot on every `ddstage bench`: the CSV's header and lines, and a plot that shows
what the bench compares (bars with their ratio to the baseline for modes and steps, one colour
per transport for bench store), on small data. No speed is ever asserted."""
import csv
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import assert_runtime_error, assert_usage_error, flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from local_mpi import MPI_ENV  # noqa: E402
from test_store import serve  # noqa: E402,F401  (fixture: real served stores)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

needs_gnuplot = pytest.mark.skipif(shutil.which("gnuplot") is None,
                                   reason="gnuplot is not installed (Debian: gnuplot-nox)")


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path):
    """The text the SVG shows, parsed as XML."""
    texts = ["".join(t.itertext()).strip() for t in ET.parse(path).getroot().iter(SVG + "text")]
    return [t for t in texts if t]


def series_colours(path):
    """{key entry: its colour} from gnuplot's SVG, where each series is a <g id=gnuplot_plot_*>
    holding its key text (where the panel has a key) and its shapes, drawn in its colour."""
    colours = {}
    for g in ET.parse(path).getroot().iter(SVG + "g"):
        if not g.get("id", "").startswith("gnuplot_plot_"):
            continue
        texts = ["".join(t.itertext()).strip() for t in g.iter(SVG + "text")]
        # Bars are filled polygons, lines stroked paths.
        drawn = [p.get("fill") for p in g.iter(SVG + "polygon")] + [p.get("stroke") for p in g.iter(SVG + "path")]
        drawn = [c for c in drawn if c and c not in ("none", "black", "currentColor")]
        if texts and drawn:
            colours[texts[0]] = drawn[0]
    return colours


def assert_bars(path, baseline, others, panels):
    """Bars for a categorical comparison: each category on the x axis without quotes, every panel
    titled with the ratio to the baseline, the baseline's bars marked, the others' bars each
    labelled with a ratio (e.g. '2.1x')."""
    texts = svg_texts(path)
    for category in [baseline, *others]:
        assert category in texts, (category, texts)
        assert f"'{category}'" not in texts and f'"{category}"' not in texts
    for panel in panels:
        assert f"{panel}, with the ratio to {baseline}" in texts, (panel, texts)
    assert texts.count("baseline") >= len(panels)
    assert len([t for t in texts if t.endswith("x") and t[:-1].replace(".", "").isdigit()]) >= len(others)
    return texts


@pytest.fixture(scope="module")
def tree(gen, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-outputs") / "tree"
    gen.ok("files", root, "--samples", 40, "--min-bytes", 100, "--max-bytes", 4000)
    return root


@needs_gnuplot
def test_bench_flatten_csv_and_plot(ddstage, tree, tmp_path):
    """bench flatten --csv: a header and one line per step, both over the same file bytes, the
    flatten line with the sample and packed bytes; --plot draws both steps as bars."""
    out_csv, svg = tmp_path / "f.csv", tmp_path / "f.svg"
    ddstage.ok("bench", "flatten", tree, "--pack", "--work-dir", tmp_path, "--csv", out_csv, "--plot", svg)
    rows = read_csv(out_csv)
    assert rows[0] == ["step", "rows", "bytes", "seconds", "gb_per_s", "sample_bytes", "packed_bytes"]
    assert [r[0] for r in rows[1:]] == ["cat", "flatten --pack"]
    (_, cat_samples, cat_bytes, *_), (_, samples, flat_bytes, _, _, sample_bytes, packed) = rows[1:]
    assert cat_samples == samples == "40" and cat_bytes == flat_bytes == sample_bytes == packed
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows[1:])
    assert_bars(svg, "cat", ["flatten --pack"], ["source files, MB/s", "seconds"])
    png = tmp_path / "f.png"
    ddstage.ok("bench", "flatten", tree, "--work-dir", tmp_path, "--plot", png)
    assert png.read_bytes()[:8] == PNG_MAGIC


@needs_gnuplot
def test_bench_load_and_loader_plots(ddstage, serve, tree, tmp_path):
    """bench load --csv: one line per step (the copy to /dev/shm included), the load's bytes
    those of the rows; --plot as bars. bench loader against the store: its plot shows per mode and epoch the
    wait's mean and p99, the share of steps waiting > 1 s, the first step's and the epoch's
    seconds, with the ratios to the store's first epoch."""
    ddx = flatten(ddstage, tmp_path / "t.ddx", tree)
    store = serve(ranks=0)
    out_csv, svg = tmp_path / "l.csv", tmp_path / "l.svg"
    ddstage.ok("bench", "load", "--store", store.dir, ddx, "--csv", out_csv, "--plot", svg)
    rows = read_csv(out_csv)
    assert rows[0] == ["step", "rows", "bytes", "seconds", "gb_per_s"]
    assert [r[0] for r in rows[1:]] == ["cat", "cat > /dev/shm", "load"]
    total = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
    assert [int(r[2]) for r in rows[1:]] == [total] * 3 and all(r[1] == "40" for r in rows[1:])
    assert_bars(svg, "cat", ["cat > /dev/shm", "load"], ["MB/s", "seconds"])

    ddstage.ok("load", "--store", store.dir, ddx, "--name", "t")
    svg = tmp_path / "loader.svg"
    ddstage.ok("bench", "loader", "--store", store.dir, "--dataset", "t", "--compare", "origin", "--batch", 4,
               "--steps", 12, "--compute-ms", 0, "--plot", svg)
    # A bar per mode and epoch (40 samples: 10 steps an epoch, then 2), ratios to the store's first.
    texts = assert_bars(svg, "store 1", ["store 2", "origin 1", "origin 2"], ["wait per step, µs", "seconds"])
    assert "steps waiting longer, %" in texts
    legends = series_colours(svg)
    assert {"mean", "p99", "> 100 ms", "> 1 s", "first step", "epoch"} <= set(legends), legends
    assert legends["mean"] != legends["p99"] and legends["> 100 ms"] != legends["> 1 s"]
    store.stop()


@needs_gnuplot
def test_bench_plot_of_nothing_measured(ddstage, tree, tmp_path):
    """Every mode unavailable (no HDF5 baseline for a tree of files): the table says why, and
    --plot is a one-line run-time error, not a crash, with no file left behind."""
    ddx = flatten(ddstage, tmp_path / "t.ddx", tree)
    proc = ddstage.run("bench", "loader", "--index", ddx, "--compare", "hdf5", "--batch", 4, "--steps", 2,
                       "--plot", tmp_path / "n.svg")
    assert_runtime_error(proc, "nothing was measured")
    assert "hdf5: n/a" in proc.stdout and not (tmp_path / "n.svg").exists()


@needs_gnuplot
def test_bench_origin_and_index_plots(ddstage, tree, tmp_path):
    """bench origin draws its modes as bars; bench index, which times no calls, draws its own
    figures against the row count (it used to fail in gnuplot on a log axis of zeros)."""
    ddx = flatten(ddstage, tmp_path / "t.ddx", tree)
    svg = tmp_path / "o.svg"
    ddstage.ok("bench", "origin", ddx, "--samples", 20, "--plot", svg)
    texts = svg_texts(svg)
    assert "index+pread" in texts and "µs per sample, with the ratio to index+pread" in texts
    svg, out_csv = tmp_path / "i.svg", tmp_path / "i.csv"
    ddstage.ok("bench", "index", "--dir", tmp_path, "--rows", 1000, 4000, "--block-bytes", 4096, 65536,
               "--verify-samples", 5, "--plot", svg, "--csv", out_csv)
    texts = svg_texts(svg)
    for panel in ("flatten, GB/s", "index bytes", "open (cold), ms", "verified read, µs"):
        assert panel in texts, (panel, texts)
    assert {"block_bytes=4096", "block_bytes=65536"} <= set(series_colours(svg))
    rows = read_csv(out_csv)
    assert "mean_us" not in rows[0] and len(rows) == 5
    assert all(float(v).is_integer() for r in rows[1:] for v in r[rows[0].index("index_bytes"):][:3])


@needs_gnuplot
def test_bench_store_plot_colours_by_transport(ddstage, tmp_path):
    """bench store with 3 transports x 5 batches: the key names each series by what varies
    (transport and batch, not the constant threads), one colour per transport, and the 5 batch
    sizes of one transport tell apart by their line style, not colour."""
    svg = tmp_path / "s.svg"
    ddstage.ok("bench", "store", "--synthetic", "3K,6K", "--synthetic-rows", 32, "--samples", 16,
               "--transport", "shm,mpi,mpi-alltoall", "--batch", "1,2,4,8,16", "--plot", svg, env=MPI_ENV)
    colours = series_colours(svg)
    transports = {"shm get_batch": "shm", "mpi get_batch": "mpi",
                  "mpi-alltoall get_batch_collective": "mpi-alltoall", "memcpy floor": "memcpy"}
    by_transport = {}
    for title, colour in colours.items():
        prefix = next((p for p in transports if title.startswith(p + " batch=")), None)
        if prefix is not None:
            assert "threads" not in title, title
            by_transport.setdefault(transports[prefix], set()).add(colour)
    assert {"shm", "mpi", "mpi-alltoall"} <= set(by_transport), colours
    assert all(len(c) == 1 for c in by_transport.values()), by_transport
    assert len({next(iter(c)) for c in by_transport.values()}) == len(by_transport), by_transport
    assert sum(1 for t in colours if " batch=" in t) >= 15


@pytest.mark.parametrize("bench", [
    ["flatten", "{tree}", "--work-dir", "{tmp}"],
    ["load", "--store", "{tmp}/no-store", "{tmp}/no.ddx"],
    ["index", "--dir", "{tmp}", "--rows", 1000],
    ["origin", "{tmp}/no.ddx"],
    ["loader", "--index", "{tmp}/no.ddx"],
    ["store", "--synthetic", "3K"],
], ids=lambda b: b[0])
def test_bench_bad_plot_extension_refused_before_measuring(ddstage, tree, tmp_path, bench):
    """A --plot that is neither .png nor .svg: exit 2 naming the extensions before anything is
    measured (a missing store or dataset is not even looked at) and no CSV is written."""
    args = [str(a).format(tree=tree, tmp=tmp_path) for a in bench]
    out_csv = tmp_path / "out.csv"
    proc = ddstage.run("bench", *args, "--csv", out_csv, "--plot", tmp_path / "out.gif", env=MPI_ENV)
    assert_usage_error(proc, ".png or .svg")
    assert not out_csv.exists() and not list(tmp_path.glob("ddstage-bench-*"))
