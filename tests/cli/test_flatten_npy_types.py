"""End to end: .npy files of every dtype a DL user brings (big-endian, complex, structured,
strings, void, datetimes) and .npz archives (stored: in place; deflated: packs), flattened and
read back byte for byte against numpy's own reader (np.load); refusals name file, member and
reason; --field on npy sources; a structured field through a store and Python's get_batch."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import (assert_runtime_error, assert_usage_error, flatten, info_json, pack_files,
                      python_package_dir, random_spec, read_bytes)

N = 37

PACKED = np.dtype([("a", "<i4"), ("b", "<f4", (3,)), ("s", "S8")])
ALIGNED = np.dtype({"names": ["flag", "x", "id"], "formats": ["u1", "<f8", "<u2"],
                    "offsets": [0, 8, 16], "itemsize": 24})
MIXED = np.dtype([("be", ">i8"), ("c", ">c8", (2,)), ("u", ">U3"), ("t", "<M8[ms]")])


def native(arr):
    """What ddstage must hand out: numpy's values in little-endian order (as h5py gives); the
    bytes as they are when already little-endian (astype would zero a record's padding)."""
    little = arr.dtype.newbyteorder("<")
    return np.ascontiguousarray(arr if arr.dtype == little else arr.astype(little))


def rows(arr, ids):
    """Rows ids, as bytes: taken as raw rows, since numpy's indexing of a record array copies
    member by member and does not keep the padding bytes between members."""
    raw = native(arr).view(np.uint8).reshape(len(arr), -1)
    return raw[np.asarray(ids)].tobytes()


def sample(dtype, shape=(), seed=0):
    """N rows of dtype: random bytes, with finite floats and printable code points where numpy
    would otherwise compare NaNs or refuse invalid characters."""
    rng = np.random.default_rng(seed)
    count = N * int(np.prod(shape, dtype=np.int64))
    arr = np.frombuffer(rng.bytes(count * dtype.itemsize), dtype).reshape((N, *shape)).copy()
    for name in dtype.names or [None]:
        target = arr if name is None else arr[name]
        if target.dtype.kind in "fc":
            target[...] = rng.standard_normal(target.shape) * 100
        elif target.dtype.kind == "U":
            n = target.dtype.itemsize // 4
            points = rng.integers(0x61, 0x7b, (target.size, n)).astype("<u4")
            target[...] = np.frombuffer(points.tobytes(), f"<U{n}").reshape(target.shape)
    return arr


CASES = {
    # name: (dtype, row shape, info dtype, info shape, extra info, in place?)
    "be_int32": (np.dtype(">i4"), (3,), "int32", [3], {}, False),
    "be_float64": (np.dtype(">f8"), (), "float64", [], {}, False),
    "be_float16": (np.dtype(">f2"), (2, 2), "float16", [2, 2], {}, False),
    "complex64": (np.dtype("<c8"), (2,), "complex64", [2], {}, True),
    "be_complex128": (np.dtype(">c16"), (), "complex128", [], {}, False),
    "packed_record": (PACKED, (), "structured", [24], {"members": [
        {"name": "a", "dtype": "int32", "offset": 0, "shape": []},
        {"name": "b", "dtype": "float32", "offset": 4, "shape": [3]},
        {"name": "s", "dtype": "bytes", "offset": 16, "shape": [8]}]}, True),
    "aligned_record": (ALIGNED, (2,), "structured", [2, 24], {"members": [
        {"name": "flag", "dtype": "uint8", "offset": 0, "shape": []},
        {"name": "x", "dtype": "float64", "offset": 8, "shape": []},
        {"name": "id", "dtype": "uint16", "offset": 16, "shape": []}]}, True),
    "be_record": (MIXED, (), "structured", [44], {"members": [
        {"name": "be", "dtype": "int64", "offset": 0, "shape": []},
        {"name": "c", "dtype": "complex64", "offset": 8, "shape": [2]},
        {"name": "u", "dtype": "uint32", "offset": 24, "shape": [3]},
        {"name": "t", "dtype": "int64", "offset": 36, "shape": []}]}, False),
    "text": (np.dtype("S8"), (), "bytes", [8], {"encoding": "ascii"}, True),
    "unicode": (np.dtype("<U5"), (2,), "uint32", [2, 5], {}, True),
    "be_unicode": (np.dtype(">U3"), (), "uint32", [3], {}, False),
    "void": (np.dtype("V6"), (), "bytes", [6], {}, True),
    "datetime": (np.dtype("<M8[ns]"), (), "int64", [], {}, True),
    "be_timedelta": (np.dtype(">m8[s]"), (4,), "int64", [4], {}, False),
}


@pytest.fixture(scope="module")
def typed(tmp_path_factory, ddstage):
    """Every case saved as its own .npy and flattened once (one ddx per case)."""
    tmp = tmp_path_factory.mktemp("typed")
    out = {}
    for i, (name, (dtype, shape, *_)) in enumerate(CASES.items()):
        arr = sample(dtype, shape, seed=i)
        np.save(tmp / f"{name}.npy", arr)
        ddx = flatten(ddstage, tmp / f"{name}.ddx", tmp / f"{name}.npy", "--memory", "64")
        out[name] = (np.load(tmp / f"{name}.npy"), ddx)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_npy_dtypes_read_as_numpy_loads_them(ddstage, typed, name):
    """Each dtype: `read` returns np.load's values in little-endian order, byte for byte;
    info records the dtype, shape, members and encoding; big-endian arrays are converted into
    pack files (within a 64-byte --memory), little-endian ones stay in place."""
    dtype, shape, info_dtype, info_shape, extra, in_place = CASES[name]
    arr, ddx = typed[name]
    assert arr.dtype == dtype
    spec, ids = random_spec(N, seed=len(name))
    assert read_bytes(ddstage, ddx, spec) == rows(arr, ids)
    assert read_bytes(ddstage, ddx, f"0-{N - 1}") == native(arr).tobytes()
    field = info_json(ddstage, ddx)["fields"][0]
    assert (field["name"], field["dtype"], field["shape"], field["row_bytes"]) == \
        (name, info_dtype, info_shape, arr[0].nbytes)
    for key in ("members", "encoding"):
        assert field.get(key) == extra.get(key)
    assert (pack_files(ddx) == []) == in_place


def test_foreign_dtypes_keep_numpy_descr(ddstage, typed):
    """'U' and datetimes become uint32 code points and int64 counts; the manifest keeps the
    numpy descr, and viewing the bytes with it gives back np.load's array."""
    for name in ("unicode", "datetime", "be_record"):
        arr, ddx = typed[name]
        descr = info_json(ddstage, ddx)["attributes"][f"numpy_dtype.{name}"]
        assert descr
    arr, ddx = typed["unicode"]
    back = np.frombuffer(read_bytes(ddstage, ddx, f"0-{N - 1}"), dtype="<U5").reshape(arr.shape)
    assert np.array_equal(back, arr)


@pytest.mark.parametrize("what,make,words", [
    ("object", lambda: np.array([{"a": 1}, None, "x"], dtype=object), ["'|O'", "pickled"]),
    ("nested", lambda: np.zeros(3, dtype=[("outer", [("inner", "<i4")])]),
     ["member 'outer'", "nested"]),
    ("long_double", lambda: np.zeros(3, dtype=np.longdouble), ["unsupported dtype '<f16'"]),
])
def test_refused_dtypes_name_file_member_and_reason(ddstage, tmp_path, what, make, words):
    src = tmp_path / f"{what}.npy"
    np.save(src, make(), allow_pickle=True)
    proc = ddstage.run("flatten", src, "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, f"{what}.npy", *words)
    assert not (tmp_path / "x.ddx").exists()


# ---- .npz ----------------------------------------------------------------------------------

def npz_arrays(seed=5):
    rng = np.random.default_rng(seed)
    return {
        "images": rng.integers(0, 256, (N, 4, 4), dtype=np.uint8),
        "labels": rng.integers(0, 10, N).astype(np.int64),
        "records": sample(PACKED, (), seed),
        "be": rng.standard_normal((N, 3)).astype(">f4"),
    }


def check_npz(ddstage, ddx, src, arrays):
    loaded = np.load(src)
    info = info_json(ddstage, ddx)
    assert [f["name"] for f in info["fields"]] == list(arrays)
    assert info["format"] == "npy" and info["samples"] == N
    spec, ids = random_spec(N, seed=11)
    for name in arrays:
        assert read_bytes(ddstage, ddx, spec, field=name) == rows(loaded[name], ids)


def test_npz_stored_members_are_indexed_in_place(ddstage, tmp_path):
    """np.savez: each member a field, the little-endian ones referenced inside the .npz (only
    the big-endian member goes to a pack), equal to np.load's arrays."""
    arrays = npz_arrays()
    src = tmp_path / "data.npz"
    np.savez(src, **arrays)
    ddx = flatten(ddstage, tmp_path / "s.ddx", src)
    check_npz(ddstage, ddx, src, arrays)
    little = {k: v for k, v in arrays.items() if k != "be"}
    np.savez(tmp_path / "little.npz", **little)
    ddx = flatten(ddstage, tmp_path / "l.ddx", tmp_path / "little.npz")
    check_npz(ddstage, ddx, tmp_path / "little.npz", little)
    assert pack_files(ddx) == []
    # Recognised by its zip magic and first member, whatever its name.
    (tmp_path / "little.bin").write_bytes((tmp_path / "little.npz").read_bytes())
    ddx = flatten(ddstage, tmp_path / "b.ddx", tmp_path / "little.bin")
    assert [f["name"] for f in info_json(ddstage, ddx)["fields"]] == list(little)


def test_npz_deflated_members_are_inflated_into_packs(ddstage, tmp_path):
    """np.savez_compressed: inflated once into packs, in pieces no larger than --memory."""
    arrays = npz_arrays(seed=6)
    src = tmp_path / "c.npz"
    np.savez_compressed(src, **arrays)
    ddx = flatten(ddstage, tmp_path / "c.ddx", src, "--memory", "100")
    check_npz(ddstage, ddx, src, arrays)
    assert pack_files(ddx)


# Spawns argv[1:] from an interpreter of a few MB and prints its peak resident memory (KiB). A
# child forked from pytest itself would report pytest's size at least: the kernel's peak counts
# the copy of the parent the child was before exec.
PEAK_RSS = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_memory_of_flatten(ddstage, src, out, *args):
    """Flattens src; the peak resident memory of that process alone, in bytes."""
    proc = subprocess.run([sys.executable, "-I", "-c", PEAK_RSS, ddstage.path, "flatten", src, "-o", out,
                           *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout) * 1024


def test_a_deflate_bomb_inflates_within_the_memory_bound(ddstage, tmp_path):
    """One 128 MiB row deflated to a few hundred KB (issue 28: a 4 MB archive can claim 4 GB)
    flattens with --memory 8M in memory that follows the bound, not the row: its peak is within
    32 MiB of a one-row archive's; the row reads back exact."""
    row_bytes = 128 << 20
    row = np.zeros((1, row_bytes), np.uint8)
    row[0, ::4099] = np.arange(len(row[0, ::4099])) % 251
    np.savez_compressed(tmp_path / "bomb.npz", x=row)
    del row
    np.savez_compressed(tmp_path / "small.npz", x=np.zeros((1, 4096), np.uint8))
    assert (tmp_path / "bomb.npz").stat().st_size < row_bytes // 100
    baseline = peak_memory_of_flatten(ddstage, tmp_path / "small.npz", tmp_path / "small.ddx", "--memory", "8M")
    peak = peak_memory_of_flatten(ddstage, tmp_path / "bomb.npz", tmp_path / "bomb.ddx", "--memory", "8M")
    assert peak < baseline + (32 << 20), f"peak {peak >> 20} MiB, {baseline >> 20} MiB for one small row"
    ddstage.ok("read", tmp_path / "bomb.ddx", "--ids", "0", "-o", tmp_path / "row.bin")
    back = np.fromfile(tmp_path / "row.bin", np.uint8)
    marks = np.zeros(row_bytes, bool)
    marks[::4099] = True
    assert back.size == row_bytes and not back[~marks].any()
    assert np.array_equal(back[marks], np.arange(marks.sum()) % 251)


def test_npz_zip64_records(ddstage, tmp_path, monkeypatch):
    """An archive with zip64 end records and zip64 sizes and offsets in the directory (what
    numpy writes past 4 GiB), made small by lowering zipfile's limit while writing."""
    arrays = npz_arrays(seed=7)
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 0)
    src = tmp_path / "z.npz"
    np.savez(src, **arrays)
    monkeypatch.undo()
    assert b"PK\x06\x06" in src.read_bytes() and b"PK\x06\x07" in src.read_bytes()
    ddx = flatten(ddstage, tmp_path / "z.ddx", src)
    check_npz(ddstage, ddx, src, arrays)


def test_npy_and_npz_sources_together(ddstage, tmp_path):
    """A .npy and a .npz: every file and member a field, equal row counts required."""
    arrays = npz_arrays(seed=8)
    np.savez_compressed(tmp_path / "a.npz", images=arrays["images"], labels=arrays["labels"])
    np.save(tmp_path / "records.npy", arrays["records"])
    ddx = flatten(ddstage, tmp_path / "m.ddx", tmp_path / "a.npz", tmp_path / "records.npy")
    assert [f["name"] for f in info_json(ddstage, ddx)["fields"]] == \
        ["images", "labels", "records"]
    assert read_bytes(ddstage, ddx, "3,1", field="records") == rows(arrays["records"], [3, 1])
    np.save(tmp_path / "short.npy", arrays["labels"][:-1])
    proc = ddstage.run("flatten", tmp_path / "a.npz", tmp_path / "short.npy", "-o",
                       tmp_path / "x.ddx")
    assert_usage_error(proc, "a.npz (member images.npy) has 37 rows", "short.npy has 36")


def test_corrupt_npz_is_refused(ddstage, tmp_path):
    """A cut directory is a usage error naming the archive; deflated data that does not
    inflate (or fails its CRC), stored data that fails its CRC, is a run-time error naming the
    member; nothing is left."""
    arrays = npz_arrays(seed=9)
    src = tmp_path / "c.npz"
    np.savez_compressed(src, **arrays)
    data = bytearray(src.read_bytes())
    (tmp_path / "cut.npz").write_bytes(data[:-30])
    assert_usage_error(ddstage.run("flatten", tmp_path / "cut.npz", "-o", tmp_path / "x.ddx"),
                       "cut.npz is not a valid zip archive")
    with zipfile.ZipFile(src) as z:
        info = z.getinfo("labels.npy")
    # Near the end of the compressed bytes, far from the .npy header at their start.
    at = info.header_offset + 30 + len(info.filename) + 20 + info.compress_size - 8
    data[at] ^= 0xFF
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    assert_runtime_error(ddstage.run("flatten", tmp_path / "bad.npz", "-o", tmp_path / "x.ddx"),
                         "bad.npz (member labels.npy)")
    # A stored member fails its CRC-32 too: numpy.load refuses it, so does ddstage.
    np.savez(tmp_path / "s.npz", labels=arrays["labels"])
    data = bytearray((tmp_path / "s.npz").read_bytes())
    data[-200] ^= 0xFF  # in the labels, before the central directory
    (tmp_path / "badcrc.npz").write_bytes(bytes(data))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        np.load(tmp_path / "badcrc.npz")["labels"]
    assert_runtime_error(ddstage.run("flatten", tmp_path / "badcrc.npz", "-o", tmp_path / "x.ddx"),
                         "badcrc.npz (member labels.npy)", "stored data is corrupt", "CRC-32")
    with zipfile.ZipFile(tmp_path / "other.npz", "w") as z:
        z.writestr("notes.txt", "hello")
    assert_usage_error(ddstage.run("flatten", tmp_path / "other.npz", "-o", tmp_path / "x.ddx"),
                       "other.npz (member notes.txt)", "not a .npy")
    with zipfile.ZipFile(tmp_path / "bz.npz", "w", compression=zipfile.ZIP_BZIP2) as z:
        z.writestr("x.npy", src.read_bytes())
    assert_usage_error(ddstage.run("flatten", tmp_path / "bz.npz", "-o", tmp_path / "x.ddx"),
                       "bz.npz (member x.npy)", "compression method 12")
    # A local header that names another member than the directory says.
    np.savez(tmp_path / "s.npz", labels=arrays["labels"])
    data = bytearray((tmp_path / "s.npz").read_bytes())
    data[30] = ord("L")
    (tmp_path / "renamed.npz").write_bytes(bytes(data))
    assert_usage_error(ddstage.run("flatten", tmp_path / "renamed.npz", "-o", tmp_path / "x.ddx"),
                       "renamed.npz is not a valid zip archive", "member 'labels.npy'",
                       "another name")
    assert not (tmp_path / "x.ddx").exists()


@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
@pytest.mark.parametrize("length,tail", [(0, 200000), (1, 200000), (0, 0), (0, 1)])
def test_npz_member_with_a_too_short_header_is_refused(ddstage, tmp_path, compression, length,
                                                       tail):
    """A version 1.0 header length of 0 or 1 (no room for a dict) ends the header before the
    12 preamble bytes already read: refused naming archive and member, not read past."""
    src = tmp_path / "short.npz"
    with zipfile.ZipFile(src, "w", compression) as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00" + bytes([length, 0]) + b"A" * tail)
    assert_usage_error(ddstage.run("flatten", src, "-o", tmp_path / "x.ddx"),
                       "short.npz (member x.npy)", f"header length {length} is too short")
    assert not (tmp_path / "x.ddx").exists()


@pytest.mark.parametrize("kind", ["stored", "deflated", "zip64"])
def test_concatenated_npz_reads_as_numpy_does(ddstage, tmp_path, monkeypatch, kind):
    """`cat a.npz b.npz`: numpy.load (Python's zipfile) reads b, whose recorded offsets are
    shifted by the length of a; ddstage must read the same bytes, in place or inflated."""
    first, second = npz_arrays(seed=12), npz_arrays(seed=13)
    save = np.savez_compressed if kind == "deflated" else np.savez
    if kind == "zip64":
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 0)
    save(tmp_path / "a.npz", **first)
    save(tmp_path / "b.npz", **second)
    monkeypatch.undo()
    src = tmp_path / "ab.npz"
    src.write_bytes((tmp_path / "a.npz").read_bytes() + (tmp_path / "b.npz").read_bytes())
    ddx = flatten(ddstage, tmp_path / "ab.ddx", src)
    check_npz(ddstage, ddx, src, second)
    assert not np.array_equal(np.load(src)["labels"], first["labels"])


def test_npz_after_other_bytes_is_refused(ddstage, tmp_path):
    """zipfile finds an archive after a prefix, numpy.load does not take it for a .npz."""
    np.savez(tmp_path / "a.npz", labels=np.arange(N))
    src = tmp_path / "prefixed.npz"
    src.write_bytes(b"#!/bin/sh\n" + (tmp_path / "a.npz").read_bytes())
    with pytest.raises(ValueError):
        np.load(src)["labels"]
    assert_usage_error(ddstage.run("flatten", src, "-o", tmp_path / "x.ddx"),
                       "prefixed.npz does not start like a zip archive")


def central_entry(data, member):
    """Offset of `member`'s entry in the central directory of the archive bytes `data`."""
    at = data.find(b"PK\x01\x02")
    while data[at + 46:at + 46 + len(member)] != member.encode():
        at = data.find(b"PK\x01\x02", at + 1)
    return at


def test_npz_directory_lies_are_refused(ddstage, tmp_path):
    """What numpy.load refuses too, or what would only make ddstage allocate for a lie: a
    member running into the next one's bytes, patched data, an impossible deflate ratio."""
    np.savez(tmp_path / "s.npz", a=np.arange(N), b=np.arange(N) * 2)
    data = bytearray((tmp_path / "s.npz").read_bytes())
    at = central_entry(data, "a.npy")
    for field in (20, 24):  # compressed size, size: one byte more runs into b.npy's header
        size = int.from_bytes(data[at + field:at + field + 4], "little")
        data[at + field:at + field + 4] = (size + 1).to_bytes(4, "little")
    (tmp_path / "overlap.npz").write_bytes(bytes(data))
    with pytest.raises(zipfile.BadZipFile, match="Overlapped"):
        np.load(tmp_path / "overlap.npz")["a"]
    assert_usage_error(ddstage.run("flatten", tmp_path / "overlap.npz", "-o", tmp_path / "x.ddx"),
                       "overlap.npz is not a valid zip archive",
                       "member 'a.npy' overlaps the next member")

    data = bytearray((tmp_path / "s.npz").read_bytes())
    data[central_entry(data, "b.npy") + 8] |= 0x20
    (tmp_path / "patched.npz").write_bytes(bytes(data))
    with pytest.raises(NotImplementedError):
        np.load(tmp_path / "patched.npz")["b"]
    assert_usage_error(ddstage.run("flatten", tmp_path / "patched.npz", "-o", tmp_path / "x.ddx"),
                       "patched.npz (member b.npy)", "patched data")

    np.savez_compressed(tmp_path / "c.npz", a=np.zeros((N, 1000), np.uint8))
    data = bytearray((tmp_path / "c.npz").read_bytes())
    at = central_entry(data, "a.npy") + 24
    data[at:at + 4] = (0x7fffffff).to_bytes(4, "little")
    (tmp_path / "bomb.npz").write_bytes(bytes(data))
    assert_runtime_error(ddstage.run("flatten", tmp_path / "bomb.npz", "-o", tmp_path / "x.ddx"),
                         "bomb.npz (member a.npy)", "cannot inflate to the 2147483647")
    assert not (tmp_path / "x.ddx").exists()


# ---- --field -------------------------------------------------------------------------------

def test_field_chooses_and_names_npy_arrays(ddstage, tmp_path):
    """--field NAME=PATH picks arrays (a .npy path, ARCHIVE.npz/MEMBER or an array's name)
    and names them; unlisted arrays are left out; an unknown PATH, an ambiguous name and
    HDF5's --ragged are refused."""
    arrays = npz_arrays(seed=10)
    np.savez(tmp_path / "a.npz", images=arrays["images"], labels=arrays["labels"])
    np.save(tmp_path / "labels.npy", arrays["labels"][::-1])
    srcs = [tmp_path / "a.npz", tmp_path / "labels.npy"]
    ddx = flatten(ddstage, tmp_path / "f.ddx", *srcs, "--field", f"y={tmp_path}/labels.npy",
                  "--field", f"{tmp_path}/a.npz/labels", "--field", "x=images")
    assert [f["name"] for f in info_json(ddstage, ddx)["fields"]] == ["y", "labels", "x"]
    assert read_bytes(ddstage, ddx, "0-4", field="y") == arrays["labels"][::-1][:5].tobytes()
    assert read_bytes(ddstage, ddx, "0-4", field="labels") == arrays["labels"][:5].tobytes()
    assert read_bytes(ddstage, ddx, "2", field="x") == arrays["images"][2].tobytes()
    assert_usage_error(ddstage.run("flatten", *srcs, "--field", "y=labels", "-o",
                                   tmp_path / "x.ddx"), "'labels' is both")
    assert_usage_error(ddstage.run("flatten", *srcs, "--field", "y=nope.npy", "-o",
                                   tmp_path / "x.ddx"), "no source array is 'nope.npy'")
    assert_usage_error(ddstage.run("flatten", *srcs, "-o", tmp_path / "x.ddx"),
                       "would both be field 'labels'", "--field")
    assert_usage_error(ddstage.run("flatten", *srcs, "--ragged", "x=/a:/b", "-o",
                                   tmp_path / "x.ddx"), "--ragged are HDF5 options")


# ---- through a store and Python ------------------------------------------------------------

PY_CHECK = """
import sys, zipfile, numpy as np, ddstage
store, npz = sys.argv[1], np.load(sys.argv[2])
d = ddstage.Client(store).open("t")
ids = [5, 0, 36, 5, 17]
for name in ("records", "text", "z"):
    want = npz[name][ids]
    got = d.get_batch(name, ids)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    assert got.shape == want.shape and np.array_equal(got, want), name
    # np.load of a .npz copies records member by member, losing their padding: the file's
    # bytes are the reference for those.
    data = zipfile.ZipFile(sys.argv[2]).read(name + ".npy")[-npz[name][0].nbytes * 37:]
    raw = np.frombuffer(data, np.uint8).reshape(37, -1)[ids]
    assert got.view(np.uint8).tobytes() == raw.tobytes(), name
print("ok")
"""


def test_load_and_read_store_structured(ddstage, tmp_path):
    """A record, a text and a complex field of a .npz loaded into a one-rank store: `read
    --store` equals the file's bytes, and Python's get_batch equals np.load's arrays, dtype
    included."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_store import Store
    rng = np.random.default_rng(12)
    arrays = {"records": sample(ALIGNED, (), 12), "text": sample(np.dtype("S5"), (), 13),
              "z": (rng.standard_normal((N, 2)) + 1j * rng.standard_normal((N, 2))).astype("<c8")}
    np.savez(tmp_path / "t.npz", **arrays)
    ddx = flatten(ddstage, tmp_path / "t.ddx", tmp_path / "t.npz")
    (tmp_path / "store").mkdir()
    store = Store(ddstage, tmp_path / "store", 0)
    try:
        ddstage.ok("load", "--store", store.dir, ddx, "--name", "t")
        got = ddstage.ok("read", "--store", store.dir, "--dataset", "t", "--ids", "3,0,36",
                         "--field", "records", binary=True).stdout
        assert got == rows(arrays["records"], [3, 0, 36])
        # The module is not built with sanitizers: an ASan run skips here (the Release run of
        # this file reads it).
        pydir = python_package_dir()
        proc = subprocess.run([sys.executable, "-c", PY_CHECK, str(store.dir),
                               str(tmp_path / "t.npz")], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(pydir)}, timeout=60)
        assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr + proc.stdout
        store.stop()
    finally:
        store.kill()
