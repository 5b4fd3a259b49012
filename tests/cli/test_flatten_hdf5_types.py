"""End to end: the HDF5 types DL data carries (compound records, complex numbers, fixed and
variable-length strings, enums, array element types, variable-length sequences, n-bit and
non-IEEE floats) flattened from files h5py writes here, and read back byte for byte against
h5py: `ddstage read` bytes, `info --json` types, and Python arrays (dtype included) from a
store. The types that stay refused are refused with the file, the dataset and the reason."""
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

from conftest import (assert_usage_error, flatten, info_json, pack_files, python_package_dir,
                      random_spec, read_bytes)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_store import serve  # noqa: E402,F401  (the store fixture: started and stopped per test)

N = 23  # rows: not a multiple of the chunk size
LAYOUTS = ["contiguous", "gzip", "compact"]

RECORD = np.dtype([("id", "<i4"), ("score", "<f8"), ("tag", "S5"), ("patch", "<f4", (2, 3)),
                   ("flag", "u1")])
ALIGNED = np.dtype([("a", "i1"), ("b", "<f8"), ("c", "<i2")], align=True)  # padding inside
BIG = np.dtype([("x", ">i4"), ("y", ">f8"), ("z", ">c8")])  # a complex member: h5py's {r, i}
COLOURS = {"RED": 0, "GREEN": 1, "BLUE": -5}


def words(rng, n):
    pool = ["", "a", "cat", "héllo wörld", "日本語のテキスト", "x" * 40, "path/to/img_0001.jpg"]
    return [pool[i] for i in rng.integers(0, len(pool), n)]


def reduced_float():
    """float32 storage with a 6-bit exponent and 20-bit mantissa (27 bits of precision)."""
    t = h5t.IEEE_F32LE.copy()
    t.set_fields(26, 20, 6, 0, 20)
    t.set_precision(27)
    t.set_ebias(31)
    return t


def ieee_layout_other_bias():
    """IEEE binary64's bit layout with VAX's exponent bias: the layout alone says float64, but
    float64 lacks its smallest exponents, so h5py reads it as long double (refused)."""
    t = h5t.IEEE_F64LE.copy()
    t.set_ebias(1025)
    return t


def nbit_int():
    t = h5t.STD_I16LE.copy()
    t.set_precision(12)
    return t


def shifted_uint():
    """10 significant bits at bit offset 3 of a uint16."""
    t = h5t.STD_U16LE.copy()
    t.set_precision(10)
    t.set_offset(3)
    return t


def type_corpus(rng):
    """name -> (data to write, HDF5 file type or None for h5py's own from data's dtype)."""
    rec = np.zeros(N, RECORD)
    rec["id"] = rng.integers(-1000, 1000, N)
    rec["score"] = rng.standard_normal(N)
    rec["tag"] = [w.encode()[:5] for w in words(rng, N)]
    rec["patch"] = rng.standard_normal((N, 2, 3))
    rec["flag"] = rng.integers(0, 255, N)
    aligned = np.zeros(N, ALIGNED)
    aligned["a"], aligned["b"], aligned["c"] = rng.integers(-9, 9, N), rng.random(N), np.arange(N)
    big = np.zeros(N, BIG)
    big["x"], big["y"], big["z"] = rng.integers(-99, 99, N), rng.standard_normal(N), 1 - 1j * np.arange(N)
    text = words(rng, N)
    return {
        "rec": (rec, None),
        "aligned": (aligned, None),
        "big": (big, None),
        "c64": ((rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype("c8"), None),
        "c128": (rng.standard_normal((N, 2)) * (1 - 2j), None),
        "ascii": (np.array([w.encode("ascii", "replace")[:7] for w in text], "S7"), None),
        "utf8": (np.array([w.encode()[:30] for w in text], h5py.string_dtype("utf-8", 30)), None),
        "vstr": (np.array(text, dtype=object), h5py.string_dtype()),
        "vascii": (np.array([w.encode("ascii", "replace") for w in text], dtype=object),
                   h5py.string_dtype("ascii")),
        "enum": (rng.choice(list(COLOURS.values()), N).astype("i2"),
                 h5py.enum_dtype(COLOURS, basetype="i2")),
        "array": (rng.standard_normal((N, 2, 3)).astype("f4"), h5t.array_create(h5t.IEEE_F32LE, (2, 3))),
        "vint": (np.array([np.arange(i % 5, dtype="i4") * i for i in range(N)] + [None], object)[:N],
                 h5py.vlen_dtype("i4")),
        "vfloat": (np.array([rng.standard_normal(i % 4) for i in range(N)] + [None], object)[:N],
                   h5py.vlen_dtype("f8")),
        "nbit": (rng.integers(-2048, 2047, N).astype("i2"), nbit_int()),
        "shifted": (rng.integers(0, 1023, N).astype("u2"), shifted_uint()),
        "reduced": (rng.standard_normal(N).astype("f4"), reduced_float()),
        "f16": (rng.standard_normal((N, 3)).astype("f2"), None),
    }


VARIABLE = {"vstr", "vascii", "vint", "vfloat"}


def file_type(data, given):
    if given is None:
        return h5t.py_create(data.dtype, logical=True)
    return given if isinstance(given, h5t.TypeID) else h5t.py_create(given, logical=True)


def create(f, name, data, given, layout):
    """Low-level creation: h5py's high-level API cannot ask for compact storage, the n-bit
    filter or a handmade float type; the data is then written through h5py as usual."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if layout == "gzip":
        dcpl.set_chunk((5,) + data.shape[1:] if name != "array" else (5,))
        if name == "nbit":
            dcpl.set_filter(h5py.h5z.FILTER_NBIT)
        dcpl.set_deflate(4)
    elif layout == "compact":
        dcpl.set_layout(h5d.COMPACT)
    shape = (N,) if name == "array" else data.shape
    h5d.create(f.id, name.encode(), file_type(data, given), h5s.create_simple(shape), dcpl=dcpl)
    if name in VARIABLE:
        for i, row in enumerate(data):  # h5py writes ragged object arrays one element at a time
            f[name][i] = row
    else:
        f[name][...] = data


def expected_rows(ds):
    """What h5py reads, as the bytes of every row: native byte order, C order; a variable
    element's bytes (a string without its NUL, a sequence's items)."""
    if h5py.check_vlen_dtype(ds.dtype) is not None:
        return [r.encode() if isinstance(r, str) else r if isinstance(r, bytes) else r.tobytes()
                for r in ds[...]]
    a = np.asarray(ds[...])
    data = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()
    size = len(data) // len(a)  # numpy trims a string scalar's padding: slice the whole array
    return [data[i * size:(i + 1) * size] for i in range(len(a))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One file per layout with every type as /NAME, flattened with every one as a field."""
    root = tmp_path_factory.mktemp("types")
    rng = np.random.default_rng(15)
    types = type_corpus(rng)
    out = {}
    for layout in LAYOUTS:
        path = root / f"{layout}.h5"
        with h5py.File(path, "w") as f:
            for name, (data, given) in types.items():
                if not (layout == "compact" and name in VARIABLE):  # compact: no heap refs
                    create(f, name, data, given, layout)
        out[layout] = path
    return out


@pytest.fixture(scope="module")
def flattened(ddstage, corpus, tmp_path_factory):
    out = {}
    for layout, path in corpus.items():
        with h5py.File(path, "r") as f:
            names = list(f)
        args = [a for n in names for a in ("--field", f"{n}=/{n}")]
        out[layout] = flatten(ddstage, tmp_path_factory.mktemp("ddx") / f"{layout}.ddx", path, *args)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_bytes_equal_h5py(ddstage, corpus, flattened, layout):
    spec, ids = random_spec(N, seed=len(layout))
    with h5py.File(corpus[layout], "r") as f:
        for name in f:
            got = read_bytes(ddstage, flattened[layout], spec, name)
            if name == "aligned":  # padding bytes are whatever conversion left: compare values
                want = f[name][...][ids]
                assert np.array_equal(np.frombuffer(got, ALIGNED), want), layout
                continue
            rows = expected_rows(f[name])
            assert got == b"".join(rows[i] for i in ids), (layout, name)


def test_info_describes_the_types(ddstage, flattened):
    fields = {f["name"]: f for f in info_json(ddstage, flattened["gzip"])["fields"]}
    rec = fields["rec"]
    assert rec["dtype"] == "structured" and rec["shape"] == [RECORD.itemsize]
    assert [(m["name"], m["offset"]) for m in rec["members"]] == \
        [(n, RECORD.fields[n][1]) for n in RECORD.names]
    assert [m["dtype"] for m in rec["members"]] == ["int32", "float64", "bytes", "float32", "uint8"]
    assert rec["members"][2]["shape"] == [5] and rec["members"][3]["shape"] == [2, 3]
    assert fields["aligned"]["shape"] == [ALIGNED.itemsize] and ALIGNED.itemsize == 24
    assert [m["offset"] for m in fields["aligned"]["members"]] == [0, 8, 16]
    assert (fields["c64"]["dtype"], fields["c128"]["dtype"], fields["c128"]["shape"]) == \
        ("complex64", "complex128", [2])
    assert (fields["ascii"]["encoding"], fields["ascii"]["shape"]) == ("ascii", [7])
    assert (fields["utf8"]["encoding"], fields["utf8"]["shape"]) == ("utf-8", [30])
    assert fields["vstr"]["variable"] and fields["vstr"]["encoding"] == "utf-8"
    assert fields["vascii"]["encoding"] == "ascii"
    assert fields["enum"]["dtype"] == "int16" and fields["enum"]["enum"] == COLOURS
    assert (fields["array"]["dtype"], fields["array"]["shape"]) == ("float32", [2, 3])
    assert (fields["vint"]["dtype"], fields["vint"]["variable"]) == ("int32", True)
    assert fields["vfloat"]["dtype"] == "float64"
    assert [fields[n]["dtype"] for n in ("nbit", "shifted", "reduced", "f16")] == \
        ["int16", "uint16", "float32", "float16"]
    assert [m["dtype"] for m in fields["big"]["members"]] == ["int32", "float64", "complex64"]


def test_records_stay_in_place_unless_converted(ddstage, corpus, tmp_path):
    """Little-endian records h5py wrote contiguously are indexed in place, a member as a
    strided slice of each; big-endian ones are converted into packs."""
    src = corpus["contiguous"]
    ddx = flatten(ddstage, tmp_path / "inplace.ddx", src, "--field", "/rec", "--field", "/aligned",
                  "--field", "id=/rec.id", "--field", "patch=/rec.patch", "--field", "/c64")
    assert pack_files(ddx) == []
    ddx = flatten(ddstage, tmp_path / "be.ddx", src, "--field", "/big")
    assert pack_files(ddx) != []


@pytest.mark.parametrize("layout, pack", [("contiguous", False), ("contiguous", True),
                                          ("gzip", False)])
def test_member_as_its_own_field(ddstage, corpus, tmp_path, layout, pack):
    src = corpus[layout]
    ddx = flatten(ddstage, tmp_path / "m.ddx", src, "--field", "id=/rec.id", "--field",
                  "patch=/rec.patch", "--field", "tag=/rec.tag", "--field", "y=/big.y",
                  *(["--pack"] if pack else []))
    fields = {f["name"]: f for f in info_json(ddstage, ddx)["fields"]}
    assert (fields["patch"]["dtype"], fields["patch"]["shape"], fields["patch"]["source"]) == \
        ("float32", [2, 3], "/rec.patch")
    assert (fields["tag"]["dtype"], fields["tag"]["shape"]) == ("bytes", [5])
    spec, ids = random_spec(N, seed=3)
    with h5py.File(src, "r") as f:
        rec, big = f["rec"][...], f["big"][...]
    for name, values in (("id", rec["id"]), ("patch", rec["patch"]), ("tag", rec["tag"]),
                         ("y", big["y"].astype("<f8"))):
        assert read_bytes(ddstage, ddx, spec, name) == np.ascontiguousarray(values[ids]).tobytes()


def test_fixed_members_of_records_holding_strings(ddstage, tmp_path):
    """h5py tables often hold a variable-length string member: the whole record is refused
    (h5py reads it as objects), its other members are fields (decoded: the stored records are
    laid out otherwise than HDF5 describes them in memory)."""
    src = tmp_path / "table.h5"
    table = np.dtype([("id", "<i8"), ("name", h5py.string_dtype()), ("w", "<f4")])
    with h5py.File(src, "w") as f:
        ds = f.create_dataset("t", (N,), dtype=table)
        for i in range(N):
            ds[i] = (i * 3, f"row {i}", i / 4)
    ddx = flatten(ddstage, tmp_path / "t.ddx", src, "--field", "id=/t.id", "--field", "w=/t.w")
    with h5py.File(src, "r") as f:
        for name in ("id", "w"):
            assert read_bytes(ddstage, ddx, f"0-{N - 1}", name) == f["t"][name].tobytes()


def test_groups_mode_takes_records_strings_and_enums(ddstage, tmp_path):
    src = tmp_path / "groups.h5"
    rng = np.random.default_rng(4)
    with h5py.File(src, "w") as f:
        for g in range(5):
            grp = f.create_group(f"s/{g:02d}")
            grp["meta"] = np.zeros((), RECORD)  # a scalar record per sample
            grp["meta"][...] = np.array((g, g / 2, b"t%d" % g, np.full((2, 3), g), g), RECORD)
            grp["points"] = rng.standard_normal((g + 1,)).astype("c8")
            grp.create_dataset("label", data=np.bytes_(f"label {g}"), dtype="S9")
            grp.create_dataset("colour", data=np.int16(-5), dtype=h5py.enum_dtype(COLOURS, "i2"))
            grp.create_dataset("caption", data="légende %d" % g * g, dtype=h5py.string_dtype())
            grp.create_dataset("seq", (), dtype=h5py.vlen_dtype("i4"))[()] = np.arange(g) * 7
    ddx = flatten(ddstage, tmp_path / "g.ddx", src, "--groups", "/s/*")
    fields = {f["name"]: f for f in info_json(ddstage, ddx)["fields"]}
    assert fields["meta"]["dtype"] == "structured" and fields["meta"]["shape"] == [RECORD.itemsize]
    assert fields["points"]["variable"] and fields["points"]["dtype"] == "complex64"
    assert fields["label"]["encoding"] == "ascii" and fields["colour"]["enum"] == COLOURS
    assert fields["caption"]["variable"] and fields["caption"]["encoding"] == "utf-8"
    assert fields["seq"]["variable"] and fields["seq"]["dtype"] == "int32"
    with h5py.File(src, "r") as f:
        for name in ("caption", "seq"):  # one string or sequence per group: its bytes
            items = [f[f"s/{g:02d}/{name}"][()] for g in range(5)]
            expected = b"".join(i if isinstance(i, bytes) else i.tobytes() for i in items)
            assert read_bytes(ddstage, ddx, "0-4", name) == expected, name
        for name in set(fields) - {"caption", "seq"}:
            expected = b"".join(f[f"s/{g:02d}/{name}"][...].tobytes() for g in range(5))
            assert read_bytes(ddstage, ddx, "0-4", name) == expected, name


def refusal_file(path):
    with h5py.File(path, "w") as f:
        f["ld"] = np.zeros(4, np.longdouble)
        h5d.create(f.id, b"bias", ieee_layout_other_bias(), h5s.create_simple((4,)))
        f.create_dataset("refs", (4,), dtype=h5py.ref_dtype)
        inner = np.dtype([("u", "<f4"), ("v", "<f4")])
        f["nested"] = np.zeros(4, [("pos", inner), ("id", "<i8")])
        f.create_dataset("objs", (4,), dtype=[("id", "<i4"), ("name", h5py.string_dtype())])
        f["rec"] = np.zeros(4, RECORD)
        f.create_dataset("vs2d", (4, 2), dtype=h5py.string_dtype())
        f["blobs"] = np.zeros(4, "V6")  # h5py writes numpy void as opaque
        h5d.create(f.id, b"bits", h5t.STD_B16LE, h5s.create_simple((4,)))
        f.create_dataset("g/0/captions", data=["one", "two"], dtype=h5py.string_dtype())


@pytest.mark.parametrize("args, words", [
    (["--field", "/ld"], ["/ld", "float of 16 bytes", "long double"]),
    (["--field", "/bias"], ["/bias", "float of 8 bytes", "exponent of bias 1025", "long double"]),
    (["--field", "/refs"], ["/refs", "reference", "point at objects"]),
    (["--field", "/blobs"], ["/blobs", "opaque of 6 bytes", "no type to record"]),
    (["--field", "/bits"], ["/bits", "bitfield of 2 bytes", "no numpy type"]),
    (["--field", "/nested"], ["/nested", "member 'pos'", "records inside records"]),
    (["--field", "/objs"], ["/objs", "member 'name'", "variable-length"]),
    (["--field", "x=/rec.nope"], ["/rec", "no member 'nope'", "members: id, score, tag"]),
    (["--field", "x=/objs.name"], ["/objs", "member 'name'", "cannot be its own field"]),
    (["--field", "/vs2d"], ["/vs2d", "variable-length strings", "1-D"]),
    (["--groups", "/g/*"], ["/g/0/captions", "[2] variable-length strings", "one per group"]),
])
def test_refusals_name_file_dataset_and_reason(ddstage, tmp_path, args, words):
    src = tmp_path / "refuse.h5"
    refusal_file(src)
    proc = ddstage.run("flatten", src, *args, "-o", tmp_path / "r.ddx")
    assert_usage_error(proc, "refuse.h5", *words)
    assert not (tmp_path / "r.ddx").exists()


def test_store_serves_records_and_strings_to_python(ddstage, serve, corpus, flattened):
    """load + read --store equals the origin read; Python's get_batch arrays equal h5py's,
    dtype included."""
    sys.path.insert(0, str(python_package_dir()))
    import ddstage as dd
    store = serve(ranks=0)
    ddx = flattened["gzip"]
    ddstage.ok("load", "--store", store.dir, ddx, "--name", "types", "--verify")
    spec, ids = random_spec(N, seed=9)
    for field in ("rec", "vstr"):
        got = ddstage.ok("read", "--store", store.dir, "--dataset", "types", "--ids", spec,
                         "--field", field, binary=True).stdout
        assert got == read_bytes(ddstage, ddx, spec, field), field
    data = dd.Client(store.dir).open("types")
    with h5py.File(corpus["gzip"], "r") as f:
        for name in ("rec", "aligned", "c64", "c128", "ascii", "utf8", "enum", "array", "f16",
                     "nbit", "big"):
            want = np.asarray(f[name][...])[ids]
            want = want.astype(want.dtype.newbyteorder("<"))
            got = data.get_batch(name, ids)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        for name in ("vstr", "vint", "vfloat"):
            rows, offsets = data.get_batch(name, ids)
            want = expected_rows(f[name])
            assert [rows[offsets[k]:offsets[k + 1]].tobytes() for k in range(len(ids))] == \
                [want[i] for i in ids], name
    store.stop()


# Types h5py maps by their properties rather than their byte size, written byte by byte (h5py
# cannot write most of them from numpy): name -> (HDF5 file type, stored bytes of ROWS rows).
ROWS = 7


def float_type(size, exp_bits, mant_bits, bias, order=h5t.ORDER_LE):
    """A float of `size` bytes: sign, exponent and mantissa at the top of its bits."""
    t = h5t.IEEE_F32LE.copy()
    t.set_order(order)
    bits = size * 8
    t.set_fields(bits - 1, mant_bits, exp_bits, 0, mant_bits)
    t.set_offset(0)
    t.set_precision(bits)
    t.set_size(size)
    t.set_ebias(bias)
    return t


def record(size, *members):
    t = h5t.create(h5t.COMPOUND, size)
    for name, offset, member in members:
        t.insert(name.encode(), offset, member)
    return t


def enum(base, **names):
    t = h5t.enum_create(base)
    for name, value in names.items():
        t.enum_insert(name.encode(), value)
    return t


def top_bytes(values, dtype, keep):
    """The most significant `keep` bytes of each little-endian value: a truncated float."""
    raw = np.asarray(values, dtype).view("u1").reshape(-1, np.dtype(dtype).itemsize)
    return np.ascontiguousarray(raw[:, -keep:]).tobytes()


def odd_corpus():
    f32 = np.array([1.0, 3.0e5, 1e-7, -2.5, 0.0, 65504.0, -1e30], "<f4")
    f64 = np.array([1.5, 1e300, 3e-300, -7.0, 0.0, 2.0 ** -1000, -1e-5])
    bf16, f24 = top_bytes(f32, "<f4", 2), top_bytes(f32, "<f4", 3)
    labels = np.array([0, 1, 7, -2, 1, 0, 300])  # 7, -2 and 300 have no name
    bools = np.array([0, 1, 1, 0, 1, 0, 0])
    ints = np.arange(ROWS) * -11
    be_enum = enum(h5t.STD_I16BE, A=0, B=1)
    le_enum = enum(h5t.STD_I16LE, A=0, B=1)

    def rows(**columns):  # a record's stored bytes from per-member byte strings and gaps
        parts = [np.frombuffer(b, "u1").reshape(ROWS, -1) for b in columns.values()]
        return np.concatenate(parts, axis=1).tobytes()

    gap2, gap4 = bytes(2 * ROWS), bytes(4 * ROWS)
    return {
        # 3: bfloat16 is float32 to h5py, a 4-byte float with an 11-bit exponent float64
        "bf16": (float_type(2, 8, 7, 127), bf16),
        "bf16_be": (float_type(2, 8, 7, 127, h5t.ORDER_BE),
                    np.frombuffer(bf16, "<u2").astype(">u2").tobytes()),
        "f24": (float_type(3, 8, 15, 127), f24),
        "f4e11": (float_type(4, 11, 20, 1023), top_bytes(f64, "<f8", 4)),
        "bf16_rec": (record(8, ("a", 0, float_type(2, 8, 7, 127)), ("n", 4, h5t.STD_I32LE)),
                     rows(a=bf16, g=gap2, n=ints.astype("<i4").tobytes())),
        "bf16_arr": (h5t.array_create(float_type(2, 8, 7, 127), (1,)), bf16),
        # 4: enums decode as their base integer, values without a name included
        "enum_be": (be_enum, labels.astype(">i2").tobytes()),
        "enum_le": (le_enum, labels.astype("<i2").tobytes()),
        "enum_rec": (record(8, ("e", 0, be_enum), ("n", 4, h5t.STD_I32LE)),
                     rows(e=labels.astype(">i2").tobytes(), g=gap2, n=ints.astype("<i4").tobytes())),
        "enum_le_rec": (record(8, ("e", 0, le_enum), ("n", 4, h5t.STD_I32LE)),
                        rows(e=labels.astype("<i2").tobytes(), g=gap2,
                             n=ints.astype("<i4").tobytes())),
        "enum_arr": (h5t.array_create(be_enum, (2,)),
                     np.stack([labels, labels[::-1]], 1).astype(">i2").tobytes()),
        # 5: any enum of exactly FALSE = 0, TRUE = 1 is bool to h5py
        "bool32": (enum(h5t.STD_I32LE, FALSE=0, TRUE=1), bools.astype("<i4").tobytes()),
        "bool16_be": (enum(h5t.STD_I16BE, FALSE=0, TRUE=1), bools.astype(">i2").tobytes()),
        "bool_rec": (record(8, ("b", 0, enum(h5t.STD_I32LE, FALSE=0, TRUE=1)),
                            ("n", 4, h5t.STD_I32LE)),
                     rows(b=bools.astype("<i4").tobytes(), n=ints.astype("<i4").tobytes())),
        # 6: {r, i} is complex to h5py wherever the pair lies in a padded record
        "cpad": (record(12, ("r", 0, h5t.IEEE_F32LE), ("i", 4, h5t.IEEE_F32LE)),
                 rows(r=f32.tobytes(), i=(-f32).tobytes(), g=gap4)),
        "cshift": (record(20, ("r", 4, h5t.IEEE_F64LE), ("i", 12, h5t.IEEE_F64LE)),
                   rows(g=gap4, r=f64.tobytes(), i=(f64 / 3).tobytes())),
    }


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """The odd corpus, plus /ov: a record whose 3-byte float grows into the next member."""
    path = tmp_path_factory.mktemp("odd") / "odd.h5"
    types = odd_corpus()
    types["ov"] = (record(4, ("a", 0, float_type(3, 8, 15, 127)), ("b", 3, h5t.STD_I8LE)),
                   bytes(b for i in range(ROWS) for b in
                         np.array([i + 0.5], "<f4").tobytes()[1:] + bytes([i + 1])))
    offsets = {}
    with h5py.File(path, "w") as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
        for name, (ftype, _) in types.items():
            ds = h5d.create(f.id, name.encode(), ftype, h5s.create_simple((ROWS,)), dcpl=dcpl)
            offsets[name] = ds.get_offset()
    with open(path, "r+b") as fh:
        for name, (ftype, raw) in types.items():
            assert len(raw) == ROWS * ftype.get_size(), name
            fh.seek(offsets[name])
            fh.write(raw)
    return path


ODD = list(odd_corpus())


@pytest.fixture(scope="module")
def odd_ddx(ddstage, odd, tmp_path_factory):
    out = tmp_path_factory.mktemp("oddx") / "odd.ddx"
    return flatten(ddstage, out, odd, *[a for n in ODD for a in ("--field", f"/{n}")])


@pytest.mark.parametrize("name", ODD)
def test_types_h5py_maps_by_their_properties(ddstage, odd, odd_ddx, name):
    """Review 15 #3-#6: dtype and bytes (values, for padded records) equal h5py's."""
    field = next(f for f in info_json(ddstage, odd_ddx)["fields"] if f["name"] == name)
    spec, ids = random_spec(ROWS, seed=15)
    got = read_bytes(ddstage, odd_ddx, spec, name)
    with h5py.File(odd, "r") as f:
        want = f[name][...]
    want = want.astype(want.dtype.newbyteorder("<"))
    if want.dtype.names is None:
        assert field["dtype"] == want.dtype.base.name
        assert field["shape"] == list(want.shape[1:])
        assert got == np.ascontiguousarray(want[ids]).tobytes()
    else:  # padding is whatever conversion left: compare member values and dtypes
        got = np.frombuffer(got, want.dtype)
        assert [m["dtype"] for m in field["members"]] == \
            [want.dtype[m].base.name for m in want.dtype.names]
        for m in want.dtype.names:
            assert np.array_equal(got[m], want[m][ids]), m


def test_odd_types_are_what_the_review_says(odd):
    """The references above are the h5py dtypes review 15 names; unnamed enum values survive."""
    with h5py.File(odd, "r") as f:
        assert [f[n].dtype.name for n in ("bf16", "f24", "f4e11", "bool32", "cpad", "cshift")] == \
            ["float32", "float32", "float64", "bool", "complex64", "complex128"]
        assert list(f["enum_be"][...]) == [0, 1, 7, -2, 1, 0, 300]


def test_enum_records_stay_in_place(ddstage, odd, tmp_path):
    """A native enum is stored as it decodes though read as an integer: it and a record holding
    one are indexed in place, not copied."""
    ddx = flatten(ddstage, tmp_path / "e.ddx", odd, "--field", "/enum_le", "--field", "/enum_le_rec")
    assert pack_files(ddx) == []
    with h5py.File(odd, "r") as f:
        assert read_bytes(ddstage, ddx, f"0-{ROWS - 1}", "enum_le") == f["enum_le"][...].tobytes()


def test_member_growing_into_the_next_is_refused_but_fields_work(ddstage, odd, tmp_path):
    """Review 15 #7: h5py's dtype for /ov has overlapping fields (its record reads are
    garbage): the record is refused naming the members, each member is its own field."""
    proc = ddstage.run("flatten", odd, "--field", "/ov", "-o", tmp_path / "ov.ddx")
    assert_usage_error(proc, "odd.h5", "/ov", "member 'b'", "overlaps member 'a'", "--field")
    assert not (tmp_path / "ov.ddx").exists()
    ddx = flatten(ddstage, tmp_path / "m.ddx", odd, "--field", "a=/ov.a", "--field", "b=/ov.b")
    with h5py.File(odd, "r") as f:
        for m in ("a", "b"):
            assert read_bytes(ddstage, ddx, f"0-{ROWS - 1}", m) == f["ov"][m].tobytes(), m
        assert list(f["ov"]["a"]) == [i + 0.5 for i in range(ROWS)]
