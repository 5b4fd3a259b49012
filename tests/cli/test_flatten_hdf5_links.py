"""End to end: HDF5 data that lives outside the file named on the command line (external links,
soft links to them, external raw data files) and data behind filter plugins, flattened and read
back byte for byte against h5py; what cannot be read is refused naming file, dataset and reason."""
import os
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from conftest import (assert_runtime_error, assert_usage_error, flatten, keep_mtime_flip,
                      le_bytes, pack_files, random_spec, read_bytes, rows_bytes)

N = 29
GROUPS = ["g0", "g1", "g10", "g2"]


def manifest_files(ddx):
    """{path relative to the source root: copied?} of the index's source files."""
    files = yaml.safe_load((Path(ddx) / "manifest.yaml").read_text())["source"]["files"]
    return {f["path"]: bool(f.get("copied", False)) for f in files}


def row_offset(path, name, row):
    with h5py.File(path, "r") as f:
        d = f[name]
        return d.id.get_offset() + row * d[0].nbytes


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """main.h5 holds only links; the data is in data/target.h5 (which holds unrelated bytes
    first, so an offset taken in the wrong file reads something else) and in data/third.h5,
    reached through a link inside target.h5."""
    root = tmp_path_factory.mktemp("links")
    (root / "data").mkdir()
    rng = np.random.default_rng(11)
    arrays = {
        "x": rng.standard_normal((N, 3)).astype(np.float32),
        "z": rng.integers(-9, 9, (N, 5), dtype=np.int16),
        "groups": {g: {"v": rng.integers(0, 99, i + 2, dtype=np.int32),
                       "w": rng.standard_normal(3)} for i, g in enumerate(GROUPS)},
    }
    with h5py.File(root / "data" / "third.h5", "w") as f:
        for g in GROUPS:
            f[f"w_{g}"] = arrays["groups"][g]["w"]
    with h5py.File(root / "data" / "target.h5", "w") as f:
        f["padding"] = np.full(4096, 0x5A, np.uint8)
        f["x"] = arrays["x"]
        f.create_dataset("z", data=arrays["z"], chunks=(4, 5), compression="gzip")
        for g in GROUPS:
            f[f"samples/{g}/v"] = arrays["groups"][g]["v"]
            f[f"samples/{g}/w"] = h5py.ExternalLink("third.h5", f"/w_{g}")
    with h5py.File(root / "main.h5", "w") as f:
        f["x"] = h5py.ExternalLink("data/target.h5", "/x")
        f["z"] = h5py.ExternalLink("data/target.h5", "/z")
        f["samples"] = h5py.ExternalLink("data/target.h5", "/samples")
        f["alias"] = h5py.SoftLink("/x")
        f["nofile"] = h5py.ExternalLink("data/gone.h5", "/x")
        f["noobject"] = h5py.ExternalLink("data/target.h5", "/nothing")
        f["dangling/a"] = h5py.SoftLink("/nowhere")
        f["broken/g0"] = h5py.ExternalLink("data/target.h5", "/samples/g0")
        f["broken/g1"] = h5py.ExternalLink("data/gone.h5", "/samples/g1")
    with h5py.File(root / "main.h5", "r") as f:
        assert np.array_equal(f["x"][...], arrays["x"]), "h5py follows the link"
    return root, arrays


def test_external_link_contiguous_in_place(ddstage, linked, tmp_path):
    """Rows of a contiguous dataset behind an external link are indexed in place in the target
    file: h5py's bytes, no pack, the target listed as a source read in place."""
    root, arrays = linked
    ddx = flatten(ddstage, tmp_path / "x.ddx", root / "main.h5", "--field", "x")
    spec, ids = random_spec(N, seed=1)
    assert read_bytes(ddstage, ddx, spec) == rows_bytes(arrays["x"], ids)
    assert pack_files(ddx) == []
    assert manifest_files(ddx) == {"main.h5": True, "data/target.h5": False}


def test_external_link_verify_checks_target_bytes(ddstage, linked, tmp_path):
    """--verify checksums the target file's bytes: it passes on them, and a byte flipped in the
    target (size and mtime kept) is found."""
    root, arrays = linked
    target = tmp_path / "data" / "target.h5"
    target.parent.mkdir()
    target.write_bytes((root / "data" / "target.h5").read_bytes())
    (tmp_path / "data" / "third.h5").write_bytes((root / "data" / "third.h5").read_bytes())
    (tmp_path / "main.h5").write_bytes((root / "main.h5").read_bytes())
    ddx = flatten(ddstage, tmp_path / "x.ddx", tmp_path / "main.h5", "--field", "x")
    out = ddstage.ok("read", ddx, "--ids", f"0-{N - 1}", "--verify", binary=True).stdout
    assert out == le_bytes(arrays["x"])
    keep_mtime_flip(target, row_offset(target, "/x", 6) + 2)
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "6", "--verify"), "sample 6")


def test_touching_target_makes_index_stale(ddstage, linked, tmp_path):
    """The target file is a source: changing it makes reads exit 1 naming it."""
    root, arrays = linked
    (tmp_path / "data").mkdir()
    for name in ("data/target.h5", "data/third.h5", "main.h5"):
        (tmp_path / name).write_bytes((root / name).read_bytes())
    ddx = flatten(ddstage, tmp_path / "x.ddx", tmp_path / "main.h5", "--field", "x")
    st = os.stat(tmp_path / "data" / "target.h5")
    os.utime(tmp_path / "data" / "target.h5", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0"), "target.h5", "changed")


def test_external_link_chunked_and_pack(ddstage, linked, tmp_path):
    """A compressed dataset behind a link is decoded into packs (target listed as copied);
    --pack copies the contiguous one too, with the same bytes."""
    root, arrays = linked
    ddx = flatten(ddstage, tmp_path / "z.ddx", root / "main.h5", "--field", "z", "--field", "x")
    spec, ids = random_spec(N, seed=2)
    assert read_bytes(ddstage, ddx, spec, field="z") == rows_bytes(arrays["z"], ids)
    assert manifest_files(ddx)["data/target.h5"] is False  # x stays in place
    packed = flatten(ddstage, tmp_path / "p.ddx", root / "main.h5", "--field", "z", "--field",
                     "x", "--pack")
    for name in ("z", "x"):
        assert read_bytes(ddstage, packed, spec, field=name) == rows_bytes(arrays[name], ids)
    assert manifest_files(packed) == {"main.h5": True, "data/target.h5": True}


def test_soft_link_to_external_link(ddstage, linked, tmp_path):
    """A soft link whose target is itself an external link leads to the target file's data."""
    root, arrays = linked
    ddx = flatten(ddstage, tmp_path / "a.ddx", root / "main.h5", "--field", "a=/alias")
    assert read_bytes(ddstage, ddx, f"0-{N - 1}") == le_bytes(arrays["x"])
    assert "data/target.h5" in manifest_files(ddx)


@pytest.mark.parametrize("pack", [False, True], ids=["in-place", "pack"])
def test_groups_through_external_link(ddstage, linked, tmp_path, pack):
    """--groups through an externally linked group, whose datasets link on into a third file:
    h5py's bytes per group, every data file a source."""
    root, arrays = linked
    ddx = flatten(ddstage, tmp_path / "g.ddx", root / "main.h5", "--groups", "/samples/*",
                  *(["--pack"] if pack else []))
    ordered = [arrays["groups"][g] for g in sorted(GROUPS)]
    spec, ids = random_spec(len(GROUPS), seed=3, count=6)
    for field in ("v", "w"):
        assert read_bytes(ddstage, ddx, spec, field=field) == b"".join(
            le_bytes(ordered[i][field]) for i in ids), field
    files = manifest_files(ddx)
    assert set(files) == {"main.h5", "data/target.h5", "data/third.h5"}
    assert files["data/third.h5"] is pack and files["data/target.h5"] is pack


def test_missing_external_file_is_named(ddstage, linked, tmp_path):
    """An external link to a missing file: exit 2 naming the link, the target file and where
    HDF5 looked for it (next to the linking file), for --field and for --groups."""
    root, _ = linked
    looked = str(root / "data" / "gone.h5")
    proc = ddstage.run("flatten", root / "main.h5", "--field", "/nofile", "-o", tmp_path / "a.ddx")
    assert_usage_error(proc, "/nofile", "main.h5", "data/gone.h5", looked)
    proc = ddstage.run("flatten", root / "main.h5", "--groups", "/broken/*", "-o", tmp_path / "b.ddx")
    assert_usage_error(proc, "/broken/g1", "data/gone.h5", looked)
    assert not (tmp_path / "a.ddx").exists() and not (tmp_path / "b.ddx").exists()


def test_dangling_links_are_named(ddstage, linked, tmp_path):
    """An external link to a missing object and a dangling soft link inside a group: exit 2
    naming the link and what it points at."""
    root, _ = linked
    proc = ddstage.run("flatten", root / "main.h5", "--field", "/noobject", "-o", tmp_path / "a.ddx")
    assert_usage_error(proc, "/noobject", "/nothing", "target.h5", "no such object")
    proc = ddstage.run("flatten", root / "main.h5", "--field", "/dangling/a", "-o", tmp_path / "b.ddx")
    assert_usage_error(proc, "/dangling/a", "soft link", "/nowhere")


# ---- external raw data storage (H5Pset_external) ---------------------------------------------

def test_external_raw_data_file(ddstage, tmp_path, monkeypatch):
    """Data kept in an external raw file reads back as h5py reads it (from the same working
    directory): in place when one raw file holds it all as stored, else decoded into packs;
    every raw file is listed. A missing raw file is named with where it was looked for;
    HDF5_EXTFILE_PREFIX=${ORIGIN} finds it next to the HDF5 file."""
    values = np.arange(N * 2, dtype="<i4").reshape(N, 2)
    with open(tmp_path / "raw.bin", "wb") as f:
        f.write(b"header!!" + values.tobytes())
    half = values.nbytes // 2
    (tmp_path / "a.bin").write_bytes(values.tobytes()[:half])
    (tmp_path / "b.bin").write_bytes(b"xy" + values.tobytes()[half:])
    src = tmp_path / "ext.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("e", shape=values.shape, dtype="<i4",
                         external=[("raw.bin", 8, values.nbytes)])
        f.create_dataset("split", shape=values.shape, dtype="<i4",
                         external=[("a.bin", 0, half), ("b.bin", 2, values.nbytes - half)])
        f.create_dataset("big", shape=values.shape, dtype=">i4",
                         external=[("raw.bin", 8, values.nbytes)])
        f.create_dataset("gone", shape=(N,), dtype="<i4", external=[("gone.bin", 0, N * 4)])
    monkeypatch.chdir(tmp_path)  # where h5py and ddstage look for relative raw file names
    with h5py.File(src, "r") as f:
        assert np.array_equal(f["split"][...], values)
        big = f["big"][...]
    ddx = flatten(ddstage, tmp_path / "e.ddx", src, "--field", "e")
    assert read_bytes(ddstage, ddx, f"0-{N - 1}") == values.tobytes()
    assert manifest_files(ddx) == {"ext.h5": True, "raw.bin": False}
    assert pack_files(ddx) == []
    ddx = flatten(ddstage, tmp_path / "s.ddx", src, "--field", "split", "--field", "big")
    assert read_bytes(ddstage, ddx, f"0-{N - 1}", field="split") == values.tobytes()
    assert read_bytes(ddstage, ddx, f"0-{N - 1}", field="big") == le_bytes(big)
    assert manifest_files(ddx) == {"ext.h5": True, "a.bin": True, "b.bin": True, "raw.bin": True}
    proc = ddstage.run("flatten", src, "--field", "gone", "-o", tmp_path / "g.ddx")
    assert_usage_error(proc, "/gone", "ext.h5", "gone.bin", str(tmp_path / "gone.bin"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = ddstage.run("flatten", src, "--field", "e", "-o", tmp_path / "o.ddx", cwd=elsewhere)
    assert_usage_error(proc, "/e", "raw.bin", str(elsewhere / "raw.bin"), "HDF5_EXTFILE_PREFIX")
    ddx = flatten(ddstage, tmp_path / "o.ddx", src, "--field", "e", cwd=elsewhere,
                  env={"HDF5_EXTFILE_PREFIX": "${ORIGIN}"})
    assert read_bytes(ddstage, ddx, f"0-{N - 1}") == values.tobytes()


def test_no_rows_names_file_and_dataset(ddstage, tmp_path):
    """A dataset of 0 rows is refused naming the file, the dataset and the reason."""
    src = tmp_path / "empty.h5"
    with h5py.File(src, "w") as f:
        f["nothing"] = np.zeros((0, 4), np.float32)
    proc = ddstage.run("flatten", src, "--field", "n=/nothing", "-o", tmp_path / "e.ddx")
    assert_usage_error(proc, "no samples", "empty.h5", "/nothing", "0 rows")


# ---- filter plugins ----------------------------------------------------------------------------

FILTERS = {"lzf": "lzf", "bzip2": 307, "blosc": 32001, "lz4": 32004, "zfp": 32013}


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    """One dataset per filter h5py can write here (LZF is h5py's own; the others come from the
    Debian plugin packages scripts/install-deps installs), with what h5py reads back (ZFP is
    lossy by default: h5py's decoded values are the reference)."""
    path = tmp_path_factory.mktemp("filters") / "filters.h5"
    data = np.random.default_rng(5).standard_normal((N, 16)).astype(np.float32)
    written = {}
    with h5py.File(path, "w") as f:
        for name, filt in FILTERS.items():
            try:
                f.create_dataset(name, data=data, chunks=(4, 16), compression=filt)
            except (ValueError, OSError):
                continue  # its plugin is not installed: the test for it skips, visibly
            written[name] = f[name][...]
    return path, written


@pytest.mark.parametrize("name", list(FILTERS))
def test_filter_plugin_roundtrip(ddstage, filtered, tmp_path, monkeypatch, name):
    """Data behind each filter reads back as h5py decodes it, without HDF5_PLUGIN_PATH."""
    monkeypatch.delenv("HDF5_PLUGIN_PATH", raising=False)
    path, written = filtered
    if name not in written:
        pytest.skip(f"h5py cannot write the {name} filter here (plugin not installed: "
                    "run scripts/install-deps)")
    if name == "lzf" and not any((Path(h5py.h5pl.get(i).decode()) / "liblzf_filter.so").exists()
                                 for i in range(h5py.h5pl.size())):
        pytest.skip("h5py writes LZF itself, but ddstage needs hdf5-plugin-lzf to read it "
                    "(run scripts/install-deps)")
    ddx = flatten(ddstage, tmp_path / "f.ddx", path, "--field", name)
    spec, ids = random_spec(N, seed=4)
    assert read_bytes(ddstage, ddx, spec) == rows_bytes(written[name], ids)


@pytest.mark.parametrize("name,words", [
    ("lz4", ["32004", "LZ4", "hdf5-filter-plugin"]),
    ("lzf", ["32000", "LZF", "hdf5-plugin-lzf"]),
])
def test_missing_filter_is_named(ddstage, filtered, tmp_path, name, words):
    """With the plugin directory hidden (HDF5_PLUGIN_PATH naming an empty one), the filter is
    named with the package that provides it and where plugins were looked for: exit 2."""
    path, written = filtered
    if name not in written:
        pytest.skip(f"h5py cannot write the {name} filter here")
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    proc = ddstage.run("flatten", path, "--field", name, "-o", tmp_path / "f.ddx",
                       env={"HDF5_PLUGIN_PATH": str(empty)})
    assert_usage_error(proc, f"/{name}", "filters.h5", *words, str(empty))


def test_plugin_that_fails_to_load_says_why(ddstage, filtered, tmp_path):
    """A plugin HDF5 finds but cannot load (here: an unresolved symbol, as Debian's LZF plugin
    has without liblzf) is refused with the loader's reason, not a bare 'not registered'."""
    path, written = filtered
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or "lz4" not in written:
        pytest.skip("needs a C compiler and the LZ4 filter")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (tmp_path / "broken.c").write_text(
        "extern int ddstage_missing_symbol(void);\n"
        "int H5PLget_plugin_type(void) { return 0; }\n"
        "const void* H5PLget_plugin_info(void) { return (const void*)(long)ddstage_missing_symbol(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-z,now", tmp_path / "broken.c", "-o",
                    plugins / "libbroken.so"], check=True, timeout=60)
    proc = ddstage.run("flatten", path, "--field", "lz4", "-o", tmp_path / "f.ddx",
                       env={"HDF5_PLUGIN_PATH": str(plugins)})
    assert_usage_error(proc, "/lz4", "32004", "ddstage_missing_symbol")


def test_optional_filter_no_chunk_used(ddstage, tmp_path):
    """An optional filter HDF5 could not apply when writing (every chunk's mask skips it) needs
    no plugin to read: flattened, h5py's bytes."""
    src = tmp_path / "optional.h5"
    values = np.arange(40 * 3, dtype="<i4").reshape(40, 3)
    with h5py.File(src, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((8, 3))
        dcpl.set_filter(32015, h5py.h5z.FLAG_OPTIONAL, ())  # Zstandard: no plugin here
        space = h5py.h5s.create_simple(values.shape)
        h5py.h5d.create(f.id, b"o", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
        f["o"][...] = values
        if h5py.h5z.filter_avail(32015) or f["o"].id.get_chunk_info(0).filter_mask != 1:
            pytest.skip("a Zstandard plugin is installed: the filter was applied")
    ddx = flatten(ddstage, tmp_path / "o.ddx", src, "--field", "o")
    assert read_bytes(ddstage, ddx, "0-39") == values.tobytes()
