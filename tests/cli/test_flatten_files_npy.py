"""End to end: .npy arrays and trees of plain files flattened by ddstage and read back, compared
byte for byte with numpy's and plain reads of the same sources."""
import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from conftest import (flatten, info_json, pack_files, random_spec, read_bytes,
                      read_bytes_to_file, rows_bytes, temp_dirs_beside)

# ---- npy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shape", [
    ("float32", (4, 3)), ("float16", (5,)), ("bool", (2, 2)), ("int8", ()), ("uint16", (3,)),
    ("int64", (1,)), ("uint64", ()), ("float64", (2, 1, 3)), ("int32", (7,)), ("uint8", (16,)),
])
def test_npy_rows(ddstage, tmp_path, dtype, shape):
    """A numpy.save'd (v1) array: sample i is row i, read in place; the field is named after the
    file's stem and carries the dtype and row shape."""
    n = 41
    rng = np.random.default_rng(n + len(shape))
    arr = (rng.standard_normal((n, *shape)) * 100).astype(dtype)
    src = tmp_path / "feat.npy"
    np.save(src, arr)
    ddx = flatten(ddstage, tmp_path / "a.ddx", src)
    spec, ids = random_spec(n, seed=len(dtype))
    assert read_bytes(ddstage, ddx, spec) == rows_bytes(arr, ids)
    field = info_json(ddstage, ddx)["fields"][0]
    assert (field["name"], field["dtype"], field["shape"], field["row_bytes"]) == \
        ("feat", dtype, list(shape), arr[0].nbytes)
    assert pack_files(ddx) == []


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_format_versions(ddstage, tmp_path, version):
    """.npy format versions 1, 2 and 3 (different header length fields) read identically."""
    arr = np.arange(60, dtype=np.int32).reshape(20, 3) * 7 - 11
    src = tmp_path / "v.npy"
    with open(src, "wb") as f:
        npy_format.write_array(f, arr, version=version)
    ddx = flatten(ddstage, tmp_path / "v.ddx", src)
    spec, ids = random_spec(20, seed=version[0])
    assert read_bytes(ddstage, ddx, spec) == rows_bytes(arr, ids)


def test_several_npy_files_are_fields(ddstage, tmp_path):
    """Several .npy files of the same row count: one field each, row i of each is sample i;
    --pack gives the same bytes from pack files."""
    rng = np.random.default_rng(3)
    arrays = {
        "images": rng.integers(0, 256, (33, 8, 8), dtype=np.uint8),
        "labels": rng.integers(0, 10, 33).astype(np.int64),
        "weights": rng.standard_normal((33, 2)).astype(np.float16),
    }
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr)
    srcs = [tmp_path / f"{n}.npy" for n in arrays]
    ddx = flatten(ddstage, tmp_path / "n.ddx", *srcs)
    packed = flatten(ddstage, tmp_path / "np.ddx", *srcs, "--pack")
    assert pack_files(packed)
    spec, ids = random_spec(33, seed=8)
    for name, arr in arrays.items():
        assert read_bytes(ddstage, ddx, spec, field=name) == rows_bytes(arr, ids)
        assert read_bytes(ddstage, packed, spec, field=name) == rows_bytes(arr, ids)
    info = info_json(ddstage, ddx)
    assert [f["name"] for f in info["fields"]] == list(arrays)
    assert info["format"] == "npy" and info["samples"] == 33


# ---- file trees ----------------------------------------------------------------------------


def make_tree(root: Path, seed=1):
    """A nested tree with an empty file, an empty directory and a symlink; returns the regular
    files in the order the contract defines (recursive, sorted by path)."""
    rng = np.random.default_rng(seed)
    names = ["b/2.bin", "a/10.bin", "a/9.bin", "a/sub/x.dat", "c.txt", "empty.bin", "b/1.bin", "Z.bin"]
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        size = 0 if name == "empty.bin" else int(rng.integers(1, 3000))
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    (root / "d" / "nothing").mkdir(parents=True)
    return sorted((root / n for n in names), key=lambda p: str(p.relative_to(root)))


def test_file_tree(ddstage, tmp_path):
    """A directory tree: every regular file is one sample, in sorted path order, read in place;
    --pack gives the same bytes from pack files."""
    root = tmp_path / "tree"
    files = make_tree(root)
    ddx = flatten(ddstage, tmp_path / "t.ddx", root)
    spec, ids = random_spec(len(files), seed=2)
    want = b"".join(files[i].read_bytes() for i in ids)
    assert read_bytes(ddstage, ddx, spec) == want
    assert read_bytes(ddstage, ddx, spec, field="data") == want
    assert pack_files(ddx) == []
    info = info_json(ddstage, ddx)
    assert info["samples"] == len(files) and info["format"] == "files"
    assert info["total_bytes"] == sum(f.stat().st_size for f in files)
    field = info["fields"][0]
    assert field["variable"] and field["dtype"] == "bytes"
    assert field["min_row_bytes"] == 0 and field["max_row_bytes"] == max(f.stat().st_size for f in files)

    packed = flatten(ddstage, tmp_path / "tp.ddx", root, "--format", "files", "--pack")
    assert pack_files(packed) == ["pack-00000.bin"]
    assert read_bytes(ddstage, packed, spec) == want


def test_pack_size_splits_packs(ddstage, tmp_path):
    """--pack-size starts a new pack file past the size; no pack is larger than it unless a
    single sample is; the bytes are unchanged."""
    root = tmp_path / "tree"
    files = make_tree(root, seed=4)
    ddx = flatten(ddstage, tmp_path / "p.ddx", root, "--pack", "--pack-size", "4K")
    packs = pack_files(ddx)
    total = sum(f.stat().st_size for f in files)
    assert len(packs) >= total // 4096
    biggest = max(f.stat().st_size for f in files)
    for p in packs:
        assert (ddx / p).stat().st_size <= max(4096, biggest)
    assert sum((ddx / p).stat().st_size for p in packs) == total
    n = len(files)
    assert read_bytes(ddstage, ddx, f"0-{n - 1}") == b"".join(f.read_bytes() for f in files)


def test_list_file(ddstage, tmp_path):
    """@LIST: one path per line in the list's order, relative to the list's directory,
    blank lines and # comments skipped."""
    root = tmp_path / "data"
    files = make_tree(root, seed=5)
    chosen = [files[3], files[0], files[5], files[1]]
    lines = ["# a comment", ""] + [str(p.relative_to(tmp_path)) for p in chosen[:3]] + ["", str(chosen[3])]
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    ddx = flatten(ddstage, tmp_path / "l.ddx", f"@{tmp_path / 'list.txt'}", "--format", "files")
    assert read_bytes(ddstage, ddx, "0-3") == b"".join(p.read_bytes() for p in chosen)
    assert read_bytes(ddstage, ddx, "3,3,0") == chosen[3].read_bytes() * 2 + chosen[0].read_bytes()


def test_generated_tree(ddstage, gen, tmp_path):
    """ddstage-gen's file tree reads back as plain reads of its files, in place and packed."""
    root = tmp_path / "gen"
    gen.ok("files", root, "--samples", 60, "--min-bytes", 1, "--max-bytes", 500)
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: str(p.relative_to(root)))
    assert len(files) == 60
    spec, ids = random_spec(60, seed=6)
    want = b"".join(files[i].read_bytes() for i in ids)
    for extra in ([], ["--pack"]):
        ddx = flatten(ddstage, tmp_path / f"g{len(extra)}.ddx", root, *extra)
        assert read_bytes_to_file(ddstage, ddx, spec, tmp_path / "out.bin") == want


def test_index_directory_permissions_follow_umask(ddstage, tmp_path):
    """The index directory gets the permissions mkdir would give under the caller's umask,
    like the files inside it: a dataset flattened for a team is readable by the team.
    (A private 0700 directory, mkdtemp's mode, would lock every other user out.)"""
    arr = np.arange(10, dtype=np.int32)
    np.save(tmp_path / "a.npy", arr)
    old = os.umask(0o022)
    try:
        ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    finally:
        os.umask(old)
    assert stat.S_IMODE((ddx / "index.bin").stat().st_mode) == 0o644
    assert stat.S_IMODE(ddx.stat().st_mode) == 0o755, oct(ddx.stat().st_mode)


def test_output_inside_source_tree_is_not_indexed(ddstage, tmp_path):
    """Flattening a tree into an index inside that tree, and again with --force, indexes the
    data files only: never the index's own manifest.yaml/index.bin, which --force replaces
    (and which would then be reported as changed sources)."""
    root = tmp_path / "images"
    files = make_tree(root, seed=7)
    out = root / "images.ddx"
    flatten(ddstage, out, root)
    assert info_json(ddstage, out)["samples"] == len(files)
    flatten(ddstage, out, root, "--force")
    info = ddstage.run("info", out, "--json")
    assert info.returncode == 0, info.stderr
    assert info_json(ddstage, out)["samples"] == len(files)
    assert read_bytes(ddstage, out, f"0-{len(files) - 1}") == b"".join(f.read_bytes() for f in files)


def dead_pid():
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_killed_flatten_leaves_nothing_the_next_one_keeps(ddstage, tmp_path):
    """A flatten killed mid-way leaves its temporary directory; the next flatten in that
    directory removes it, and only what a flatten on this host that is gone left: a live
    writer's (this test's pid), another host's and a foreign directory stay."""
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "sparse.bin", "wb") as f:
        f.truncate(4 << 30)  # hashed at page-cache speed: seconds, so the flatten can be caught
    proc = subprocess.Popen([ddstage.path, "flatten", big, "-o", tmp_path / "big.ddx"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(20_000):
            if temp_dirs_beside(tmp_path / "big.ddx") or proc.poll() is not None:
                break
            time.sleep(0.001)
    finally:
        proc.kill()
        proc.wait()
    left = temp_dirs_beside(tmp_path / "big.ddx")
    assert len(left) == 1, f"the killed flatten left {left} (exit {proc.returncode})"
    host = socket.gethostname()
    assert left[0].startswith(f".big.ddx.tmp-{host}-{proc.pid}-"), left
    kept = [f".live.ddx.tmp-{host}-{os.getpid()}-abcdef", f".far.ddx.tmp-otherhost-{dead_pid()}-abcdef",
            ".mine.tmp-notes", f".old.ddx.tmp-{dead_pid()}-abcdef"]
    gone = f".dead.ddx.tmp-{host}-{dead_pid()}-abcdef"
    for name in [*kept, gone]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.bin").write_bytes(b"x")
    root = tmp_path / "small"
    files = make_tree(root)
    flatten(ddstage, tmp_path / "small.ddx", root)
    assert temp_dirs_beside(tmp_path / "big.ddx") == [] and not (tmp_path / gone).exists()
    assert all((tmp_path / name / "index.bin").exists() for name in kept)
    assert read_bytes(ddstage, tmp_path / "small.ddx", f"0-{len(files) - 1}") == \
        b"".join(f.read_bytes() for f in files)
