"""End to end: tar shards (ustar, GNU, pax; plain and compressed) flattened by ddstage and read
back, compared byte for byte with what Python's tarfile (an independent reader) extracts; the
WebDataset layout; and the refusals of broken shards."""
import io
import os
import tarfile
import time

import numpy as np
import pytest

from conftest import (assert_usage_error, flatten, info_json, pack_files, random_spec,
                      read_bytes)
from test_store import serve  # noqa: F401 (the fixture)


def tar_members(path):
    """(name bytes, data) of every regular member, as tarfile reads them: the reference."""
    with tarfile.open(path) as t:
        return [(m.name.encode("utf-8", "surrogateescape"), t.extractfile(m).read())
                for m in t.getmembers() if m.isreg()]


def add(t, name, data, **info):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    for k, v in info.items():
        setattr(ti, k, v)
    t.addfile(ti, io.BytesIO(data))


def add_non_files(t):
    """Directories (also v7's: a regular type with a trailing slash), a symlink, a hard link
    and a fifo: not samples (tarfile's isreg() is False)."""
    for name, kind in (("adir", tarfile.DIRTYPE), ("alink", tarfile.SYMTYPE),
                       ("ahard", tarfile.LNKTYPE), ("olddir/", tarfile.AREGTYPE),
                       ("afifo", tarfile.FIFOTYPE)):
        ti = tarfile.TarInfo(name)
        ti.type = kind
        ti.linkname = "" if kind == tarfile.DIRTYPE else "m0"
        t.addfile(ti)


SIZES = [0, 1, 511, 512, 513, 3000, 0, 1_300_000, 77]  # 1.3 MB: read through a mapping


def write_shard(path, fmt, seed, long_names):
    rng = np.random.default_rng(seed)
    pax = {"comment": "a global pax header"} if fmt == tarfile.PAX_FORMAT else None
    with tarfile.open(path, "w", format=fmt, pax_headers=pax) as t:
        for i, size in enumerate(SIZES):
            name = f"m{i}" if i == 0 else f"part{seed}/sample_{i:03d}.bin"
            if long_names and i % 2:
                # Past ustar's 100-byte name: a prefix (ustar), an 'L' member (GNU), path= (pax).
                name = f"{'deep/' * 24}sample_{seed}_{i}.bin"
            add(t, name, rng.bytes(size))
            if i == 3:
                add_non_files(t)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("tar")
    out = {}
    for name, fmt in (("ustar", tarfile.USTAR_FORMAT), ("gnu", tarfile.GNU_FORMAT),
                      ("pax", tarfile.PAX_FORMAT)):
        out[name] = d / f"{name}.tar"
        write_shard(out[name], fmt, seed=len(out), long_names=True)
    return out


def expected(paths):
    return [m for p in paths for m in tar_members(p)]


def assert_same(ddstage, ddx, members, seed=0):
    spec, ids = random_spec(len(members), seed=seed)
    assert read_bytes(ddstage, ddx, spec, "data") == b"".join(members[i][1] for i in ids)
    assert read_bytes(ddstage, ddx, spec, "name") == b"".join(members[i][0] for i in ids)
    everything = f"0-{len(members) - 1}"
    assert read_bytes(ddstage, ddx, everything, "data") == b"".join(m[1] for m in members)


@pytest.mark.parametrize("kind", ["ustar", "gnu", "pax"])
def test_members_in_place(ddstage, shards, tmp_path, kind):
    """Every regular member is a sample (data, name) read in place from the tar, byte-identical
    to tarfile's extraction, long names included; directories and links are not samples. Only
    names split over the ustar prefix are not contiguous in the tar, so only they are packed."""
    ddx = flatten(ddstage, tmp_path / "a.ddx", shards[kind], "--format", "tar")
    members = tar_members(shards[kind])
    assert len(members) == len(SIZES)
    assert_same(ddstage, ddx, members, seed=len(kind))
    info = info_json(ddstage, ddx)
    assert [f["name"] for f in info["fields"]] == ["data", "name"]
    assert (pack_files(ddx) != []) == (kind == "ustar")
    ddstage.ok("read", ddx, "--ids", f"0-{len(members) - 1}", "--field", "data", "--verify",
               "-o", tmp_path / "all")


def test_several_shards_detected_and_pack(ddstage, shards, tmp_path):
    """Shards given together are samples in the given order; the format is detected (by the
    ustar magic, whatever the name); --pack copies the same bytes into packs."""
    renamed = tmp_path / "shard.bin"
    renamed.write_bytes(shards["gnu"].read_bytes())
    order = [shards["pax"], renamed, shards["ustar"]]
    ddx = flatten(ddstage, tmp_path / "s.ddx", *order)
    assert info_json(ddstage, ddx)["format"] == "tar"
    assert_same(ddstage, ddx, expected(order), seed=5)
    packed = flatten(ddstage, tmp_path / "p.ddx", *order, "--pack")
    assert pack_files(packed) != []
    assert_same(ddstage, packed, expected(order), seed=6)


def test_tar_of_hdf5_is_a_tar(ddstage, tmp_path):
    """A shard whose first member is an HDF5 file (its signature at byte 512, where HDF5 looks
    for one after a user block) is detected as tar, not HDF5."""
    import h5py
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a"] = np.arange(10)
    src = tmp_path / "h5shard"
    with tarfile.open(src, "w") as t:
        t.add(tmp_path / "x.h5", arcname="x.h5")
    ddx = flatten(ddstage, tmp_path / "h.ddx", src)
    assert info_json(ddstage, ddx)["format"] == "tar"
    assert read_bytes(ddstage, ddx, "0", "data") == (tmp_path / "x.h5").read_bytes()


def test_pax_size_record(ddstage, tmp_path):
    """A pax size= record overrides the header's size field (0 here), as for members of 8 GiB
    and more."""
    src = tmp_path / "size.tar"
    data = os.urandom(1234)
    with tarfile.open(src, "w", format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo("big.bin")
        ti.size = len(data)
        ti.pax_headers = {"size": str(len(data))}
        t.addfile(ti, io.BytesIO(data))
        add(t, "after.bin", b"next member")
    # tarfile writes the size field too: make it wrong, so only the pax record is right.
    raw = bytearray(src.read_bytes())
    header = raw.index(b"big.bin", 512)  # the member's own header, after its pax header
    raw[header + 124:header + 136] = b"00000000001\0"
    fix_checksum(raw, header)
    src.write_bytes(raw)
    assert [d for _, d in tar_members(src)] == [data, b"next member"]
    ddx = flatten(ddstage, tmp_path / "z.ddx", src)
    assert read_bytes(ddstage, ddx, "0,1", "data") == data + b"next member"


def fastest_flatten(ddstage, src, out, tries=3):
    """The least wall time of `tries` flattens of src (each into a fresh out): the run least
    disturbed by whatever else the machine is doing."""
    best = float("inf")
    for i in range(tries):
        start = time.monotonic()
        ddstage.ok("flatten", src, "-o", f"{out}{i}.ddx")
        best = min(best, time.monotonic() - start)
    return best


def test_global_pax_header_of_many_keys_costs_once(ddstage, tmp_path):
    """A global pax header of 65,000 keys before 2,000 one-byte members is parsed once: the
    flatten costs at most a few times that of the same members without it (every member used
    to copy all the global records: past 100 s). Each member still reads right."""
    members = [(f"m{i:04d}", bytes([i % 251])) for i in range(2000)]
    plain, crafted = tmp_path / "plain.tar", tmp_path / "crafted.tar"
    for path, pax in ((plain, None), (crafted, {f"x.k{i:05d}": "v" for i in range(65_000)})):
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers=pax) as t:
            for name, data in members:
                add(t, name, data)
    assert crafted.stat().st_size > plain.stat().st_size + 900_000  # the header is there
    baseline = fastest_flatten(ddstage, plain, tmp_path / "plain")
    took = fastest_flatten(ddstage, crafted, tmp_path / "crafted")
    assert took <= 10 * baseline, f"{took:.2f} s with the global header, {baseline:.2f} s without"
    assert read_bytes(ddstage, tmp_path / "crafted0.ddx", "0,1999,250", "data") == \
        members[0][1] + members[1999][1] + members[250][1]


def test_base256_size(ddstage, tmp_path):
    """GNU's base-256 size field (what sizes of 8 GiB and more use) reads like octal."""
    src = tmp_path / "b256.tar"
    data = os.urandom(700)
    with tarfile.open(src, "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "one.bin", data)
    raw = bytearray(src.read_bytes())
    raw[124:136] = bytes([0x80]) + len(data).to_bytes(11, "big")
    fix_checksum(raw, 0)
    src.write_bytes(raw)
    assert tar_members(src) == [(b"one.bin", data)]
    ddx = flatten(ddstage, tmp_path / "b.ddx", src)
    assert read_bytes(ddstage, ddx, "0", "data") == data


def test_unknown_type_and_signed_checksum(ddstage, tmp_path):
    """A member of a type tarfile does not know is skipped with its data, as tarfile skips it;
    a header checksummed the old way (signed bytes) is accepted, as tarfile accepts it."""
    src = tmp_path / "odd.tar"
    with tarfile.open(src, "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "vendor.bin", os.urandom(900))
        add(t, "caf\u00e9.bin", os.urandom(300))
    raw = bytearray(src.read_bytes())
    raw[156:157] = b"Z"
    fix_checksum(raw, 0)
    second = 512 + 1024
    raw[second + 148:second + 156] = b" " * 8
    signed = sum(b - 256 if b > 127 else b for b in raw[second:second + 512])
    assert signed != sum(raw[second:second + 512])
    raw[second + 148:second + 156] = b"%06o\0 " % signed
    src.write_bytes(raw)
    members = tar_members(src)
    assert [m[0] for m in members] == ["caf\u00e9.bin".encode()]
    ddx = flatten(ddstage, tmp_path / "o.ddx", src)
    assert_same(ddstage, ddx, members)


def test_long_name_without_member_refused(ddstage, tmp_path):
    """A GNU long-name header followed by the end of the archive is refused, not ignored."""
    src = tmp_path / "dangling.tar"
    with tarfile.open(src, "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "x" * 150, b"data")
    raw = src.read_bytes()
    src.write_bytes(raw[:1024] + bytes(1024))  # the 'L' header and its name, then the end
    proc = ddstage.run("flatten", src, "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, str(src), "followed by no member")


@pytest.mark.parametrize("how", ["gnu-type", "pax-records"])
def test_sparse_refused(ddstage, tmp_path, how):
    """Sparse members (GNU type 'S', or pax GNU.sparse.* records) are refused, naming them."""
    src = tmp_path / "sparse.tar"
    with tarfile.open(src, "w", format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo("holes.bin")
        ti.size = 4
        if how == "pax-records":
            ti.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}
        t.addfile(ti, io.BytesIO(b"abcd"))
    if how == "gnu-type":
        raw = bytearray(src.read_bytes())
        raw[156:157] = b"S"
        fix_checksum(raw, 0)
        src.write_bytes(raw)
    proc = ddstage.run("flatten", src, "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, str(src), "holes.bin", "sparse")


# ---- WebDataset ------------------------------------------------------------------------------

def write_wds(path, keys, seed, skip=None, dirs="train/"):
    rng = np.random.default_rng(seed)
    samples = []
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for k in keys:
            key = f"{dirs}{k:06d}"
            fields = {"jpg": rng.bytes(int(rng.integers(100, 5000))),
                      "cls": str(int(rng.integers(0, 1000))).encode(),
                      "json": b'{"caption": "a picture %d"}' % k,
                      "seg.png": rng.bytes(64)}
            for ext, data in fields.items():
                if (k, ext) == skip:
                    continue
                # WebDataset lower-cases extensions: JPG is field jpg.
                add(t, f"{key}.{'JPG' if ext == 'jpg' and k % 2 else ext}", data)
            samples.append((key.encode(), fields))
    return samples


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    d = tmp_path_factory.mktemp("wds")
    paths = [d / "shard-000.tar", d / "shard-001.tar"]
    samples = write_wds(paths[0], range(0, 20), seed=1) + write_wds(paths[1], range(20, 33),
                                                                    seed=2)
    return paths, samples


def test_webdataset_layout(ddstage, wds, tmp_path):
    """--webdataset: one sample per key, in shard then archive order; one field per extension
    (everything after the first dot, lower-cased), sorted, and __key__; all in place."""
    paths, samples = wds
    ddx = flatten(ddstage, tmp_path / "w.ddx", *paths, "--webdataset")
    info = info_json(ddstage, ddx)
    assert [f["name"] for f in info["fields"]] == ["cls", "jpg", "json", "seg.png", "__key__"]
    assert info["samples"] == len(samples)
    assert pack_files(ddx) == []
    spec, ids = random_spec(len(samples), seed=9)
    for field in ("cls", "jpg", "json", "seg.png"):
        assert read_bytes(ddstage, ddx, spec, field) == b"".join(samples[i][1][field] for i in ids)
    assert read_bytes(ddstage, ddx, spec, "__key__") == b"".join(samples[i][0] for i in ids)


def test_webdataset_read_from_store(ddstage, wds, serve, tmp_path):  # noqa: F811
    """`read --store` after `load` returns the same bytes as the shards."""
    paths, samples = wds
    ddx = flatten(ddstage, tmp_path / "w.ddx", *paths, "--webdataset")
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, ddx, "--name", "wds", "--verify")
    spec, ids = random_spec(len(samples), seed=10)
    for field in ("jpg", "__key__"):
        got = ddstage.ok("read", "--store", store.dir, "--dataset", "wds", "--ids", spec,
                         "--field", field, binary=True).stdout
        want = [samples[i][0] if field == "__key__" else samples[i][1][field] for i in ids]
        assert got == b"".join(want)


def test_webdataset_refusals(ddstage, tmp_path):
    """A key missing a field the others have, a key that comes back, and a member without an
    extension are refused naming the shard, the key or member, and the reason; nothing left."""
    missing = tmp_path / "missing.tar"
    write_wds(missing, range(5), seed=3, skip=(3, "cls"))
    proc = ddstage.run("flatten", missing, "--webdataset", "-o", tmp_path / "m.ddx")
    assert_usage_error(proc, str(missing), "train/000003", "'cls'")

    back = tmp_path / "back.tar"
    with tarfile.open(back, "w") as t:
        for name in ("a.jpg", "b.jpg", "a.cls"):
            add(t, name, b"x")
    proc = ddstage.run("flatten", back, "--webdataset", "-o", tmp_path / "b.ddx")
    assert_usage_error(proc, str(back), "key 'a'", "a.cls")

    bare = tmp_path / "bare.tar"
    with tarfile.open(bare, "w") as t:
        add(t, "README", b"x")
    proc = ddstage.run("flatten", bare, "--webdataset", "-o", tmp_path / "c.ddx")
    assert_usage_error(proc, str(bare), "README", "extension")
    assert not any(tmp_path.glob("*.ddx"))


# ---- compressed shards -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["gz", "bz2", "xz"])
def test_compressed_shards_into_packs(ddstage, shards, tmp_path, mode):
    """A compressed tar is decoded once and every member copied into packs; the source is
    recorded as copied. Bytes as tarfile extracts them."""
    src = tmp_path / f"s.tar.{mode}"
    with tarfile.open(shards["pax"]) as plain, tarfile.open(src, f"w:{mode}",
                                                            format=tarfile.PAX_FORMAT) as t:
        for m in plain.getmembers():
            t.addfile(m, plain.extractfile(m) if m.isreg() else None)
    ddx = flatten(ddstage, tmp_path / "c.ddx", src)
    assert pack_files(ddx) != []
    assert_same(ddstage, ddx, tar_members(src), seed=11)
    info = info_json(ddstage, ddx)
    assert (info["source_files"], info["copied_source_files"]) == (1, 1)


# ---- broken shards ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "first.bin", os.urandom(2000))
        add(t, "second.bin", os.urandom(3000))
    return path.read_bytes()


def fix_checksum(raw, header):
    raw[header + 148:header + 156] = b" " * 8
    raw[header + 148:header + 156] = b"%06o\0 " % sum(raw[header:header + 512])


def broken(good, what):
    raw = bytearray(good)
    second = raw.index(b"second.bin")
    if what == "checksum":
        raw[second + 1] ^= 1  # the name changes, the stored checksum does not
    elif what == "octal":
        raw[second + 124:second + 136] = b"00000009999\0"
        fix_checksum(raw, second)
    elif what == "mtime":
        raw[second + 136:second + 148] = b"1234567z012\0"
        fix_checksum(raw, second)
    elif what == "past-end":
        raw = raw[:second + 512 + 1000]
    elif what == "no-end-block":
        raw = raw[:second + 512 + 3072]  # the second member whole, then nothing
    elif what == "inside-header":
        raw = raw[:second + 100]
    return bytes(raw)


@pytest.mark.parametrize("what,words", [
    ("checksum", ["checksum", "header at byte 2560"]),
    ("octal", ["second.bin", "not an octal number"]),
    ("mtime", ["header at byte 2560", "mtime", "not an octal number"]),
    ("past-end", ["second.bin", "past the end", "truncated"]),
    ("no-end-block", ["end-of-archive", "truncated"]),
    ("inside-header", ["inside a header", "truncated"]),
])
def test_broken_shard_refused(ddstage, good, tmp_path, what, words):
    """Each kind of damage is refused (exit 2, one line) naming the shard and the member or
    header, before any index is written."""
    src = tmp_path / "bad.tar"
    src.write_bytes(broken(good, what))
    proc = ddstage.run("flatten", src, "--format", "tar", "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, str(src), *words)
    assert not (tmp_path / "x.ddx").exists()


def test_corrupt_gzip_refused(ddstage, good, tmp_path):
    import gzip
    data = gzip.compress(good)
    src = tmp_path / "cut.tar.gz"
    src.write_bytes(data[:len(data) // 2])
    proc = ddstage.run("flatten", src, "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, str(src), "cannot decode")


def test_webdataset_needs_tar(ddstage, tmp_path):
    np.save(tmp_path / "a.npy", np.arange(4))
    proc = ddstage.run("flatten", tmp_path / "a.npy", "--webdataset", "-o", tmp_path / "x.ddx")
    assert_usage_error(proc, "--webdataset", "npy")


# ---- bench origin ----------------------------------------------------------------------------

def test_bench_origin_against_tarfile(ddstage, wds, tmp_path):
    """bench origin on WebDataset shards measures index+pread and Python's tarfile in the same
    run; tarfile's pass covers every sample and its bytes add up to the index's (no speed is
    asserted)."""
    import json
    paths, samples = wds
    ddx = flatten(ddstage, tmp_path / "w.ddx", *paths, "--webdataset")
    out = tmp_path / "o.json"
    stdout = ddstage.ok("bench", "origin", ddx, "--samples", 50, "--json", out).stdout
    result = json.loads(out.read_text())
    cells = {c["dims"]["mode"]: c for c in result["cells"]}
    assert list(cells) == ["index+pread", "python-tarfile"]
    assert cells["index+pread"]["rows"] == 50
    assert cells["python-tarfile"]["rows"] == len(samples)
    data_bytes = sum(len(d) for _, fields in samples for d in fields.values())
    assert cells["python-tarfile"]["bytes"] == data_bytes
    assert all(c["mismatches"] == 0 for c in cells.values())
    assert "ratio: python-tarfile" in stdout
