"""End to end: HDF5 sources flattened by ddstage, read back with `ddstage read`, and compared
byte for byte with what h5py reads from the same files (little-endian, C order)."""
import json
import zlib

import h5py
import numpy as np
import pytest

from conftest import (flatten, info_json, le_bytes, pack_files, random_spec, read_bytes,
                      read_bytes_to_file, rows_bytes)

N = 37  # samples in the rows files: not a multiple of any chunk size below

ROW_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64"]


def random_array(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def make_compact(f, name, data):
    """h5py's high-level API cannot ask for the compact layout; the low-level one can."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(data.shape)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=dcpl)
    f[name][...] = data


def layout_of(path, name):
    with h5py.File(path, "r") as f:
        return f[name].id.get_create_plist().get_layout()


@pytest.fixture(scope="module")
def mixed_rows(tmp_path_factory):
    """One HDF5 file with a field per storage kind the rows mode handles, and the arrays."""
    path = tmp_path_factory.mktemp("h5") / "mixed.h5"
    rng = np.random.default_rng(7)
    arrays = {
        "f16": random_array(rng, "float16", (N, 3)),
        "flags": random_array(rng, "bool", (N, 5)),
        "img": random_array(rng, "int8", (N, 4, 3)),
        "u64": random_array(rng, "uint64", (N,)),
        "gz": random_array(rng, "float32", (N, 6)),
        "cmp": random_array(rng, "int16", (N, 2)),
        "be": random_array(rng, "int32", (N, 3)).astype(">i4"),
        "bef": random_array(rng, "float64", (N,)).astype(">f8"),
    }
    with h5py.File(path, "w") as f:
        for name in ("f16", "flags", "img", "u64", "be", "bef"):
            f[name] = arrays[name]
        f.create_dataset("gz", data=arrays["gz"], chunks=(5, 6), compression="gzip", shuffle=True)
        make_compact(f, "cmp", arrays["cmp"])
        f["unused"] = np.zeros(3)
    assert layout_of(path, "cmp") == h5py.h5d.COMPACT
    assert layout_of(path, "gz") == h5py.h5d.CHUNKED
    assert layout_of(path, "f16") == h5py.h5d.CONTIGUOUS
    return path, arrays


def field_args(names):
    return [a for n in names for a in ("--field", f"{n}=/{n}")]


@pytest.fixture(scope="module")
def mixed_index(ddstage, mixed_rows, tmp_path_factory):
    path, arrays = mixed_rows
    out = tmp_path_factory.mktemp("ddx") / "mixed.ddx"
    return flatten(ddstage, out, path, *field_args(arrays))


@pytest.mark.parametrize("dtype", ROW_DTYPES)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)], ids=["scalar", "1d", "2d"])
def test_contiguous_rows_every_dtype(ddstage, tmp_path, dtype, shape):
    """Contiguous rows of every supported dtype and row rank read back exactly as h5py reads
    them, for unsorted ids with repeats and ranges; the manifest names dtype and shape."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype}{shape}".encode()))
    data = random_array(rng, dtype, (N, *shape))
    src = tmp_path / "rows.h5"
    with h5py.File(src, "w") as f:
        f["group/values"] = data
    ddx = flatten(ddstage, tmp_path / "rows.ddx", src, "--field", "/group/values")
    spec, ids = random_spec(N, seed=len(dtype) + len(shape))
    # The field name defaults to the last path component; the only field needs no --field.
    assert read_bytes(ddstage, ddx, spec) == rows_bytes(data, ids)
    assert read_bytes(ddstage, ddx, spec, field="values") == rows_bytes(data, ids)
    field = info_json(ddstage, ddx)["fields"][0]
    assert (field["name"], field["dtype"], field["shape"], field["variable"]) == \
        ("values", dtype, list(shape), False)
    assert field["row_bytes"] == data[0].nbytes
    assert pack_files(ddx) == [], "contiguous little-endian data is indexed in place"


@pytest.mark.parametrize("name", ["f16", "flags", "img", "u64", "gz", "cmp", "be", "bef"])
def test_mixed_storage_fields(ddstage, mixed_rows, mixed_index, tmp_path, name):
    """Each storage kind (contiguous, chunked+gzip, compact, big-endian) reads back as h5py's
    little-endian rows, through stdout and through -o."""
    _, arrays = mixed_rows
    spec, ids = random_spec(N, seed=zlib.crc32(name.encode()))
    want = rows_bytes(arrays[name], ids)
    assert read_bytes(ddstage, mixed_index, spec, field=name) == want
    assert read_bytes_to_file(ddstage, mixed_index, spec, tmp_path / "out.bin", field=name) == want


def test_mixed_storage_manifest(ddstage, mixed_rows, mixed_index):
    """Big-endian fields are recorded as their little-endian dtype; chunked, compact and
    big-endian data lands in pack files; every field has N samples."""
    _, arrays = mixed_rows
    info = info_json(ddstage, mixed_index)
    assert info["samples"] == N
    by_name = {f["name"]: f for f in info["fields"]}
    assert list(by_name) == list(arrays)
    assert by_name["be"]["dtype"] == "int32" and by_name["bef"]["dtype"] == "float64"
    assert by_name["img"]["shape"] == [4, 3] and by_name["img"]["row_bytes"] == 12
    assert info["total_bytes"] == sum(a.nbytes for a in arrays.values())
    assert pack_files(mixed_index), "chunked/compact/big-endian data needs a pack file"


def test_pack_gives_identical_bytes(ddstage, mixed_rows, mixed_index, tmp_path):
    """--pack copies every field into pack files and reads back the same bytes."""
    path, arrays = mixed_rows
    packed = flatten(ddstage, tmp_path / "packed.ddx", path, *field_args(arrays), "--pack")
    assert pack_files(packed)
    spec, _ = random_spec(N, seed=3)
    for name in arrays:
        assert read_bytes(ddstage, packed, spec, field=name) == read_bytes(ddstage, mixed_index, spec, field=name)


def test_all_ids_in_order_equal_whole_dataset(ddstage, mixed_rows, mixed_index):
    """--ids 0-(N-1) returns each whole dataset, as h5py reads it."""
    _, arrays = mixed_rows
    for name, arr in arrays.items():
        assert read_bytes(ddstage, mixed_index, f"0-{N - 1}", field=name) == le_bytes(arr)


# ---- groups per sample ---------------------------------------------------------------------

GROUP_NAMES = ["s9", "s10", "s100", "a", "s2", "s11", "z0", "s1"]  # insertion order != name order


@pytest.fixture(scope="module")
def groups_file(tmp_path_factory):
    """/samples/<name>/{x float32[len,3], y int64[1], z uint8[len2] chunked+gzip}, plus a
    stray dataset beside the groups; returns the path and per-sample arrays in name order."""
    path = tmp_path_factory.mktemp("h5") / "groups.h5"
    rng = np.random.default_rng(11)
    samples = {}
    with h5py.File(path, "w") as f:
        for i, name in enumerate(GROUP_NAMES):
            g = f.create_group(f"samples/{name}")
            x = rng.standard_normal((int(rng.integers(1, 9)), 3)).astype(np.float32)
            y = np.array([i * 1000 + 7], dtype=np.int64)
            z = rng.integers(0, 256, int(rng.integers(1, 300))).astype(np.uint8)
            g["x"] = x
            g["y"] = y
            g.create_dataset("z", data=z, chunks=(min(64, len(z)),), compression="gzip")
            samples[name] = {"x": x, "y": y, "z": z}
        f["other/x"] = np.zeros(3)
    ordered = [samples[n] for n in sorted(GROUP_NAMES, key=lambda s: s.encode())]
    return path, ordered


def test_groups_per_sample(ddstage, groups_file, tmp_path):
    """--groups: one sample per group in HDF5 name order (byte order, not numeric or
    insertion order), each dataset a field; variable lengths read back exactly."""
    path, ordered = groups_file
    ddx = flatten(ddstage, tmp_path / "g.ddx", path, "--groups", "/samples/*")
    n = len(ordered)
    spec, ids = random_spec(n, seed=5)
    for field in ("x", "y", "z"):
        want = b"".join(le_bytes(ordered[i][field]) for i in ids)
        assert read_bytes(ddstage, ddx, spec, field=field) == want, field
    info = info_json(ddstage, ddx)
    assert info["samples"] == n
    fields = {f["name"]: f for f in info["fields"]}
    assert set(fields) == {"x", "y", "z"}
    assert fields["x"]["variable"] and fields["x"]["dtype"] == "float32" and fields["x"]["row_bytes"] == 0
    assert fields["x"]["min_row_bytes"] == min(s["x"].nbytes for s in ordered)
    assert fields["x"]["max_row_bytes"] == max(s["x"].nbytes for s in ordered)
    assert fields["z"]["dtype"] == "uint8" and fields["z"]["variable"]
    packed = flatten(ddstage, tmp_path / "gp.ddx", path, "--groups", "/samples/*", "--pack")
    assert pack_files(packed)
    for field in ("x", "y", "z"):
        assert read_bytes(ddstage, packed, spec, field=field) == read_bytes(ddstage, ddx, spec, field=field)


# ---- ragged (CSR) --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ragged_file(tmp_path_factory):
    """Graphs in CSR form with empty graphs, mixed with a per-graph label."""
    path = tmp_path_factory.mktemp("h5") / "graphs.h5"
    rng = np.random.default_rng(23)
    graphs = 20
    nodes = rng.integers(0, 7, graphs)
    nodes[[0, 5]] = 0
    edges = rng.integers(0, 10, graphs)
    x_ptr = np.concatenate([[0], np.cumsum(nodes)]).astype(np.int64)
    e_ptr = np.concatenate([[0], np.cumsum(edges)]).astype(np.uint32)
    x = rng.standard_normal((int(x_ptr[-1]), 4)).astype(np.float32)
    edge_index = rng.integers(0, 50, (int(e_ptr[-1]), 2)).astype(np.int64)
    y = rng.standard_normal(graphs).astype(np.float64)
    with h5py.File(path, "w") as f:
        f["x"] = x
        f["x_ptr"] = x_ptr
        f.create_dataset("edge_index", data=edge_index, chunks=(min(7, len(edge_index)), 2), compression="gzip")
        f["edge_ptr"] = e_ptr
        f["y"] = y
    ref = {
        "x": [x[x_ptr[i]:x_ptr[i + 1]] for i in range(graphs)],
        "edges": [edge_index[e_ptr[i]:e_ptr[i + 1]] for i in range(graphs)],
        "y": [y[i] for i in range(graphs)],
    }
    return path, ref, graphs


def test_ragged_csr(ddstage, ragged_file, tmp_path):
    """--ragged NAME=DATA:OFFSETS: sample i is rows OFFSETS[i]..OFFSETS[i+1] of DATA (also
    empty graphs, also a chunked+gzip DATA), mixed with a --field of the same N."""
    path, ref, graphs = ragged_file
    args = [path, "--ragged", "x=/x:/x_ptr", "--ragged", "edges=/edge_index:/edge_ptr", "--field", "/y"]
    ddx = flatten(ddstage, tmp_path / "r.ddx", *args)
    packed = flatten(ddstage, tmp_path / "rp.ddx", *args, "--pack")
    spec, ids = random_spec(graphs, seed=9)
    for field in ("x", "edges", "y"):
        want = b"".join(le_bytes(ref[field][i]) for i in ids)
        assert read_bytes(ddstage, ddx, spec, field=field) == want, field
        assert read_bytes(ddstage, packed, spec, field=field) == want, field
    # An empty graph reads as zero bytes.
    assert read_bytes(ddstage, ddx, "0,5", field="x") == b""
    fields = {f["name"]: f for f in info_json(ddstage, ddx)["fields"]}
    assert fields["x"]["variable"] and fields["x"]["shape"] == [4] and fields["x"]["dtype"] == "float32"
    assert fields["edges"]["variable"] and fields["edges"]["shape"] == [2]
    assert not fields["y"]["variable"] and fields["y"]["row_bytes"] == 8


# ---- several source files ------------------------------------------------------------------

def test_several_files_concatenate(ddstage, tmp_path):
    """Several HDF5 files: their samples are concatenated in the order given, whatever each
    file's storage (contiguous, chunked+gzip, big-endian)."""
    rng = np.random.default_rng(31)
    parts = []
    for i, (n, kind) in enumerate([(5, "contiguous"), (9, "gzip"), (1, "contiguous"), (6, "bigendian")]):
        feats = rng.standard_normal((n, 2, 2)).astype(np.float32)
        labels = np.arange(n, dtype=np.int64) + 100 * i
        path = tmp_path / f"part{i}.h5"
        with h5py.File(path, "w") as f:
            if kind == "gzip":
                f.create_dataset("features", data=feats, chunks=(2, 2, 2), compression="gzip")
            elif kind == "bigendian":
                feats = feats.astype(">f4")
                f["features"] = feats
            else:
                f["features"] = feats
            f["labels"] = labels
        parts.append((path, feats, labels))
    # Given out of name order on purpose: the order of the arguments is the order of samples.
    order = [parts[2], parts[0], parts[3], parts[1]]
    feats = np.concatenate([p[1].astype("<f4") for p in order])
    labels = np.concatenate([p[2] for p in order])
    ddx = flatten(ddstage, tmp_path / "multi.ddx", *[p[0] for p in order],
                  "--field", "x=/features", "--field", "/labels")
    spec, ids = random_spec(len(labels), seed=4)
    assert read_bytes(ddstage, ddx, spec, field="x") == rows_bytes(feats, ids)
    assert read_bytes(ddstage, ddx, spec, field="labels") == rows_bytes(labels, ids)
    info = info_json(ddstage, ddx)
    assert info["samples"] == len(labels) and info["source_files"] == 4


def test_generated_files_match_h5py(ddstage, gen, tmp_path):
    """ddstage-gen's rows, groups and ragged files (in place and deflated) read back as h5py
    reads them: the generator and the flattener agree with an independent reader."""
    rows = tmp_path / "rows.h5"
    gen.ok("hdf5-rows", rows, "--samples", 50, "--shape", "3,2", "--dtype", "int16", "--deflate")
    ddx = flatten(ddstage, tmp_path / "rows.ddx", rows, "--field", "/features", "--field", "/labels")
    spec, ids = random_spec(50, seed=1)
    with h5py.File(rows, "r") as f:
        assert read_bytes(ddstage, ddx, spec, field="features") == rows_bytes(f["features"][...], ids)
        assert read_bytes(ddstage, ddx, spec, field="labels") == rows_bytes(f["labels"][...], ids)

    groups = tmp_path / "groups.h5"
    gen.ok("hdf5-groups", groups, "--samples", 30, "--min-bytes", 1, "--max-bytes", 200)
    ddx = flatten(ddstage, tmp_path / "groups.ddx", groups, "--groups", "/samples/*")
    spec, ids = random_spec(30, seed=2)
    with h5py.File(groups, "r") as f:
        names = sorted(f["samples"])
        for field in ("x", "y"):
            want = b"".join(le_bytes(f["samples"][names[i]][field][...]) for i in ids)
            assert read_bytes(ddstage, ddx, spec, field=field) == want

    graphs = tmp_path / "graphs.h5"
    gen.ok("hdf5-ragged", graphs, "--graphs", 25, "--chunked")
    ddx = flatten(ddstage, tmp_path / "graphs.ddx", graphs, "--ragged", "x=/x:/x_ptr",
                  "--ragged", "edges=/edge_index:/edge_ptr")
    spec, ids = random_spec(25, seed=3)
    with h5py.File(graphs, "r") as f:
        x, ptr = f["x"][...], f["x_ptr"][...]
        want = b"".join(le_bytes(x[ptr[i]:ptr[i + 1]]) for i in ids)
        assert read_bytes(ddstage, ddx, spec, field="x") == want


@pytest.mark.parametrize("memory", ["64K", "1M"])
def test_deflated_dataset_over_many_chunks(ddstage, gen, tmp_path, memory):
    """A deflated dataset spanning many ~64 KiB chunks, decoded within a small --memory,
    reads back row for row as h5py decodes it (chunk boundaries fall inside rows)."""
    src = tmp_path / "big.h5"
    gen.ok("hdf5-rows", src, "--samples", 3001, "--shape", "5,3", "--dtype", "float64", "--deflate")
    with h5py.File(src, "r") as f:
        feats, labels = f["features"][...], f["labels"][...]
        assert f["features"].chunks is not None and f["features"].compression == "gzip"
    ddx = flatten(ddstage, tmp_path / "big.ddx", src, "--field", "/features", "--field", "/labels",
                  "--memory", memory)
    assert read_bytes(ddstage, ddx, "0-3000", field="features") == le_bytes(feats)
    assert read_bytes(ddstage, ddx, "0-3000", field="labels") == le_bytes(labels)
    spec, ids = random_spec(3001, seed=12, count=200)
    assert read_bytes(ddstage, ddx, spec, field="features") == rows_bytes(feats, ids)


def test_several_files_groups_and_ragged(ddstage, tmp_path):
    """--groups and --ragged over several files: samples concatenate file by file (each
    file's offsets are its own), and bench origin's HDF5 baseline agrees with every sample."""
    rng = np.random.default_rng(41)
    group_ref, ragged_ref = [], []
    for k in range(3):
        with h5py.File(tmp_path / f"g{k}.h5", "w") as f:
            for i in range(k + 2):
                v = rng.integers(0, 100, int(rng.integers(1, 6))).astype(np.int32)
                f[f"samples/s{i}/v"] = v
                group_ref.append(v)
        counts = rng.integers(0, 4, k + 3)
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        x = rng.standard_normal((int(ptr[-1]), 2)).astype(np.float32)
        with h5py.File(tmp_path / f"r{k}.h5", "w") as f:
            f["x"] = x
            f["ptr"] = ptr
        ragged_ref += [x[ptr[i]:ptr[i + 1]] for i in range(len(counts))]
    g = flatten(ddstage, tmp_path / "g.ddx", *[tmp_path / f"g{k}.h5" for k in range(3)], "--groups", "/samples/*")
    r = flatten(ddstage, tmp_path / "r.ddx", *[tmp_path / f"r{k}.h5" for k in range(3)], "--ragged", "x=/x:/ptr")
    for ddx, ref in ((g, group_ref), (r, ragged_ref)):
        spec, ids = random_spec(len(ref), seed=len(ref))
        assert read_bytes(ddstage, ddx, spec) == b"".join(le_bytes(ref[i]) for i in ids)
        out = tmp_path / "bench.json"
        ddstage.ok("bench", "origin", ddx, "--samples", 100, "--json", out)
        cells = json.loads(out.read_text())["cells"]
        assert [c["dims"]["mode"] for c in cells] == ["index+pread", "hdf5-api"]
        assert [c["mismatches"] for c in cells] == [0, 0]
