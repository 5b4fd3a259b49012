"""Structure-aware corruption (issue 13, points 2 and 3): the manifest.yaml fields and index.bin
records a random byte flip rarely hits, edited with yaml and struct and resealed with valid
checksums, so that only ddstage's own consistency checks stand between them and a reader.
Every case is refused at open with one `ddstage: error:` line naming the file and exit 1, or
is harmless (exit 0 and the right bytes): never a crash, never wrong bytes with exit 0, and
in a served store never a wedged rank or a shared-memory segment left behind."""
import ctypes
import shutil
import struct

import numpy as np
import pytest
import yaml

from conftest import assert_runtime_error, flatten, keep_mtime_flip, read_bytes
from test_store import serve, status  # noqa: F401 (serve is a fixture)

ROWS = 100
# man ddstage-index(5): the header, a format 3 field table and run, a file-table record.
HEADER = struct.Struct("<8sIIQIIQQQQQQQ")
MAGIC, VERSION, HEADER_BYTES, SAMPLES, FIELDS, FILES, ENTRIES_AT, TABLE_AT, NAMES_AT, FILE_BYTES, BODY_SUM, \
    HEADER_SUM, FIELDS_SUM = range(13)
FIELD_TABLE = struct.Struct("<IIQQQQ")
RUN = struct.Struct("<QQQQQQII")
RUN_NAMES = ("first_sample", "count", "base", "stride", "length", "first_block", "file", "block_rows")
RECORD = struct.Struct("<QIIQq")
U64 = 2**64

_xxhash = ctypes.CDLL("libxxhash.so.0")
_xxhash.XXH3_64bits.restype = ctypes.c_uint64
_xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(data):
    data = bytes(data)
    return _xxhash.XXH3_64bits(data, len(data))


class IndexBin:
    """index.bin (format 3) as header, field 0's runs and file records; seal() writes it back
    with both checksums recomputed, as a crafted (not merely damaged) file would be."""

    def __init__(self, ddx):
        self.path = ddx / "index.bin"
        self.data = bytearray(self.path.read_bytes())
        self.h = list(HEADER.unpack_from(self.data))
        assert self.h[VERSION] == 3
        self.table = list(FIELD_TABLE.unpack_from(self.data, self.h[ENTRIES_AT]))
        assert self.table[0] == 1, "field 0 is stored as runs"
        self.run_at = self.table[2]
        self.record_at = self.h[TABLE_AT]

    def run(self, i):
        return dict(zip(RUN_NAMES, RUN.unpack_from(self.data, self.run_at + i * RUN.size)))

    def edit_run(self, i, **changes):
        r = self.run(i)
        r.update(changes)
        RUN.pack_into(self.data, self.run_at + i * RUN.size,
                      *(r[n] % (2**32 if n in ("file", "block_rows") else U64) for n in RUN_NAMES))

    def edit_table(self, **changes):
        names = ("layout", "reserved", "records_offset", "records", "blocks_offset", "blocks")
        t = dict(zip(names, self.table))
        t.update(changes)
        FIELD_TABLE.pack_into(self.data, self.h[ENTRIES_AT], *(t[n] % U64 for n in names))

    def edit_record(self, i, **changes):
        names = ("name_offset", "name_length", "kind", "size", "mtime_ns")
        r = dict(zip(names, RECORD.unpack_from(self.data, self.record_at + i * RECORD.size)))
        r.update(changes)
        RECORD.pack_into(self.data, self.record_at + i * RECORD.size, *(r[n] for n in names))

    def seal(self):
        self.h[BODY_SUM] = xxh3(self.data[self.h[ENTRIES_AT]:]) if self.h[ENTRIES_AT] < len(self.data) else 0
        self.h[HEADER_SUM] = 0
        HEADER.pack_into(self.data, 0, *self.h)
        self.h[HEADER_SUM] = xxh3(self.data[:min(self.h[HEADER_BYTES], HEADER.size)])
        HEADER.pack_into(self.data, 0, *self.h)
        self.path.write_bytes(bytes(self.data))


@pytest.fixture
def fixed(ddstage, tmp_path):
    """100 rows of float32[64] (256 bytes, as in the issue), indexed in place in one .npy."""
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "x.npy", np.arange(ROWS * 64, dtype=np.float32).reshape(ROWS, 64))
    ddx = flatten(ddstage, tmp_path / "fixed.ddx", src / "x.npy")
    ids = f"0-{ROWS - 1}"
    return ddx, ids, read_bytes(ddstage, ddx, ids)


@pytest.fixture
def variable(ddstage, gen, tmp_path):
    """A tree of 30 files of 1-900 bytes: one variable field of opaque bytes."""
    gen.ok("files", tmp_path / "tree", "--samples", 30, "--min-bytes", 1, "--max-bytes", 900)
    ddx = flatten(ddstage, tmp_path / "variable.ddx", tmp_path / "tree")
    return ddx, "0-29", read_bytes(ddstage, ddx, "0-29")


class NoAliases(yaml.SafeDumper):
    """ddstage never writes YAML aliases and refuses them (test_trust covers that), so an edit
    that repeats a value (a field twice) must reach the manifest's own checks without any."""

    def ignore_aliases(self, data):
        return True


def edit_manifest(ddx, edit):
    path = ddx / "manifest.yaml"
    manifest = yaml.safe_load(path.read_text())
    edit(manifest)
    path.write_text(yaml.dump(manifest, Dumper=NoAliases, sort_keys=False))


def error_lines(proc):
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{stderr}"
    assert "internal error" not in stderr and "terminate called" not in stderr, stderr
    return stderr


def assert_clear(proc, words=()):
    """Exit 1 and one error line holding words (crash checks first, with their own message)."""
    error_lines(proc)
    assert_runtime_error(proc, *words)


def assert_refused_or_right(ddstage, dataset, words):
    """words: info, info --verify and read must refuse the index, naming them. None: each may
    refuse it (clearly) or not, but read never exits 0 with other bytes."""
    ddx, ids, expected = dataset
    procs = [ddstage.run("info", ddx), ddstage.run("info", ddx, "--verify"),
             ddstage.run("read", ddx, "--ids", ids, binary=True)]
    for proc in procs:
        if words is not None or proc.returncode != 0:
            assert_clear(proc, words or ())
    if words is not None:
        assert procs[-1].stdout == b""
    elif procs[-1].returncode == 0:
        assert procs[-1].stdout == expected, "wrong bytes with exit 0"


def field(key, value):
    return lambda m: m["fields"][0].__setitem__(key, value)


def both(*edits):
    def edit(m):
        for e in edits:
            e(m)
    return edit


MANIFEST_FIXED = {
    # The cases: a size that disagrees with the shape, or with the entries.
    "row_bytes 255": (field("row_bytes", 255), ["manifest.yaml", "row_bytes 255"]),
    "row_bytes 128": (field("row_bytes", 128), ["manifest.yaml", "row_bytes 128"]),
    "row_bytes 0": (field("row_bytes", 0), ["manifest.yaml", "row_bytes 0"]),
    "row_bytes -1": (field("row_bytes", -1), ["manifest.yaml", "row_bytes"]),
    "row_bytes text": (field("row_bytes", "many"), ["manifest.yaml", "row_bytes"]),
    "shape [44]": (field("shape", [44]), ["manifest.yaml", "shape [44]"]),
    "shape []": (field("shape", []), ["manifest.yaml", "row_bytes 256"]),
    "shape [64, 0]": (field("shape", [64, 0]), ["manifest.yaml", "row_bytes 256"]),
    "shape overflows": (field("shape", [2**62, 64]), ["manifest.yaml", "too large"]),
    "shape negative": (field("shape", [-1]), ["manifest.yaml", "shape"]),
    "shape 40 dims": (field("shape", [1] * 39 + [64]), ["manifest.yaml", "dimensions"]),
    "dtype float64": (field("dtype", "float64"), ["manifest.yaml", "makes 512"]),
    "dtype complex256": (field("dtype", "complex256"), ["manifest.yaml", "dtype"]),
    "variable": (field("variable", True), ["manifest.yaml", "variable"]),
    "no row_bytes": (lambda m: m["fields"][0].pop("row_bytes"), ["manifest.yaml", "row_bytes"]),
    "samples 99": (lambda m: m.__setitem__("samples", 99), ["manifest.yaml", "samples"]),
    "samples 101": (lambda m: m.__setitem__("samples", 101), ["manifest.yaml", "samples"]),
    "samples 0": (lambda m: m.__setitem__("samples", 0), ["manifest.yaml", "samples"]),
    "no fields": (lambda m: m.__setitem__("fields", []), ["manifest.yaml", "no fields"]),
    "field twice": (lambda m: m["fields"].append(dict(m["fields"][0])), ["manifest.yaml", "twice"]),
    "fields a map": (lambda m: m.__setitem__("fields", {"x": m["fields"][0]}), ["manifest.yaml"]),
    "total_bytes 0": (lambda m: m.__setitem__("total_bytes", 0), ["manifest.yaml", "total_bytes"]),
    "total_bytes + 1": (lambda m: m.__setitem__("total_bytes", m["total_bytes"] + 1), ["manifest.yaml", "total_bytes"]),
    # Consistent with itself: only the field table's checksum in index.bin can tell.
    "shape [128], row_bytes 512": (both(field("shape", [128]), field("row_bytes", 512)),
                                   ["manifest.yaml", "field table"]),
    "shape [8, 8]": (field("shape", [8, 8]), ["manifest.yaml", "field table"]),
    "dtype int32": (field("dtype", "int32"), ["manifest.yaml", "field table"]),
    "field renamed": (field("name", "z"), ["manifest.yaml", "field table"]),
    # Not read by any reader: harmless, or a clear error.
    "file_count": (lambda m: m["source"].__setitem__("file_count", 999), None),
    "pack_count": (lambda m: m.__setitem__("pack_count", 7), None),
    "files listing": (lambda m: m["source"].__setitem__("files", []), None),
    "dataset name": (lambda m: m.__setitem__("name", "other"), None),
    "created": (lambda m: m.__setitem__("created", [1, 2]), None),
    "source root": (lambda m: m["source"].__setitem__("root", "/nonexistent/ddstage"), None),
}


@pytest.mark.parametrize("case", MANIFEST_FIXED)
def test_manifest_field_of_fixed_rows(ddstage, fixed, case):
    edit, words = MANIFEST_FIXED[case]
    edit_manifest(fixed[0], edit)
    assert_refused_or_right(ddstage, fixed, words)


MANIFEST_VARIABLE = {
    "made fixed": (field("variable", False), ["manifest.yaml", "row_bytes 0"]),
    "row_bytes 1": (field("row_bytes", 1), ["manifest.yaml", "variable"]),
    "element shape [3]": (field("shape", [3]), ["manifest.yaml", "field table"]),
    "dtype int64": (field("dtype", "int64"), ["manifest.yaml", "field table"]),
    "total_bytes 1": (lambda m: m.__setitem__("total_bytes", 1), ["manifest.yaml", "total_bytes"]),
}


@pytest.mark.parametrize("case", MANIFEST_VARIABLE)
def test_manifest_field_of_variable_rows(ddstage, variable, case):
    edit, words = MANIFEST_VARIABLE[case]
    edit_manifest(variable[0], edit)
    assert_refused_or_right(ddstage, variable, words)


def header(index, position, value):
    index.h[position] = value % U64


INDEX_FIXED = {
    # The fixed field's 100 rows are one run of one block (man ddstage-index(5)).
    "run file id out of range": (lambda i: i.edit_run(0, file=9), ["names file 9 of 1"]),
    "row 999 of 100": (lambda i: i.edit_run(0, base=i.run(0)["base"] + 999 * 256), ["past the end"]),
    "base + length wraps": (lambda i: i.edit_run(0, base=U64 - 8), ["past the end"]),
    "length wraps": (lambda i: i.edit_run(0, length=U64 - 1), ["past the end"]),
    "stride past the file": (lambda i: i.edit_run(0, stride=512), ["past the end"]),
    "stride * count wraps": (lambda i: i.edit_run(0, stride=2**60), ["past the end"]),
    "length 128 of 256": (lambda i: i.edit_run(0, length=128), ["row_bytes 256"]),
    "length 0": (lambda i: i.edit_run(0, length=0), ["row_bytes 256"]),
    "run from sample 1": (lambda i: i.edit_run(0, first_sample=1), ["covers samples from 1"]),
    "run of 99 rows": (lambda i: i.edit_run(0, count=99), ["covering 99 of 100 samples"]),
    "run of 2^64 - 1 rows": (lambda i: i.edit_run(0, count=U64 - 1), ["run 0 covers"]),
    "no rows per block": (lambda i: i.edit_run(0, block_rows=0), ["blocks the table does not hold"]),
    "a block per row": (lambda i: i.edit_run(0, block_rows=1), ["blocks the table does not hold"]),
    "layout 7": (lambda i: i.edit_table(layout=7), ["field 0 has a run table"]),
    "runs past the end": (lambda i: i.edit_table(records=2**58), ["field 0 has a run table"]),
    "blocks over the header": (lambda i: i.edit_table(blocks_offset=8), ["field 0 has a run table"]),
    "samples 2^59 + 100": (lambda i: header(i, SAMPLES, 2**59 + ROWS), ["does not match"]),
    "fields 2^32 - 1": (lambda i: header(i, FIELDS, 2**32 - 1), ["corrupt"]),
    "no files": (lambda i: header(i, FILES, 0), ["names file 0 of 0"]),
    "files 2^32 - 1": (lambda i: header(i, FILES, 2**32 - 1), ["corrupt"]),
    "entries at 0": (lambda i: header(i, ENTRIES_AT, 0), ["corrupt"]),
    "entries past the end": (lambda i: header(i, ENTRIES_AT, i.h[FILE_BYTES] + 8), ["corrupt"]),
    "file table wraps": (lambda i: header(i, TABLE_AT, U64 - 8), ["corrupt"]),
    "names wrap": (lambda i: header(i, NAMES_AT, U64 - 8), ["corrupt"]),
    "format 1 header size": (lambda i: header(i, HEADER_BYTES, 80), ["corrupt"]),
    "recorded file size too small": (lambda i: i.edit_record(0, size=1000), ["past the end"]),
    "file name wraps": (lambda i: i.edit_record(0, name_offset=U64 - 2), ["file table row 0"]),
    "file kind 7": (lambda i: i.edit_record(0, kind=7), ["file table row 0"]),
    "file kind copied": (lambda i: i.edit_record(0, kind=2), ["copied into packs"]),
}


@pytest.mark.parametrize("case", INDEX_FIXED)
def test_crafted_index_bin(ddstage, fixed, case):
    craft, words = INDEX_FIXED[case]
    seal_with(fixed[0], craft)
    assert_refused_or_right(ddstage, fixed, ["index.bin", *words])


LOAD_CASES = [
    ("row 999 of 100", "index.bin", lambda ddx: seal_with(ddx, INDEX_FIXED["row 999 of 100"][0])),
    ("samples wrap", "index.bin", lambda ddx: seal_with(ddx, lambda i: header(i, SAMPLES, 2**59 + ROWS))),
    ("run length 128", "index.bin", lambda ddx: seal_with(ddx, lambda i: i.edit_run(0, length=128))),
    ("run stride 512", "index.bin", lambda ddx: seal_with(ddx, lambda i: i.edit_run(0, stride=512))),
    ("row_bytes 0", "manifest.yaml", lambda ddx: edit_manifest(ddx, field("row_bytes", 0))),
    ("shape [44]", "manifest.yaml", lambda ddx: edit_manifest(ddx, field("shape", [44]))),
    ("row_bytes 128, shape [32]", "manifest.yaml",
     lambda ddx: edit_manifest(ddx, both(field("row_bytes", 128), field("shape", [32])))),
]


def seal_with(ddx, craft):
    index = IndexBin(ddx)
    craft(index)
    index.seal()


def test_load_refuses_damage_before_any_rank_allocates(ddstage, serve, fixed, tmp_path):
    """Each damaged index: `load` exits 1 with one line naming the file, no segment appears,
    the store keeps answering and serving; then a manifest edited after a good load is refused
    by `read --store` rather than trusted (the issue's 12,800 bytes past `out`)."""
    ddx, ids, expected = fixed
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, ddx, "--name", "good")
    before = store.segments()
    for name, file, damage in LOAD_CASES:
        copy = tmp_path / f"{name.replace(' ', '_')}.ddx"
        shutil.copytree(ddx, copy)
        damage(copy)
        assert_clear(ddstage.run("load", "--store", store.dir, copy, "--name", "bad"), [file])
        assert store.segments() == before, name
        assert [d["name"] for d in status(ddstage, store.dir)["datasets"]] == ["good"]
    assert ddstage.ok("read", "--store", store.dir, "--dataset", "good", "--ids", ids, binary=True).stdout == expected
    edit_manifest(ddx, both(field("row_bytes", 128), field("shape", [32])))
    for verify in ([], ["--verify"]):
        proc = ddstage.run("read", "--store", store.dir, "--dataset", "good", "--ids", ids, *verify, binary=True)
        assert_clear(proc, ["manifest.yaml"])
        assert proc.stdout == b""
    store.stop()


BLOCK_ROWS = 40_000  # float32[4]: 16-byte rows, checksummed in blocks of 16384 rows


@pytest.fixture
def blocks(ddstage, tmp_path):
    """40,000 rows of 16 bytes in one .npy (one run; blocks 0..16383, 16384..32767, 32768..),
    with a byte of sample 20000 flipped after flattening, size and mtime kept."""
    arr = np.arange(BLOCK_ROWS * 4, dtype=np.float32).reshape(BLOCK_ROWS, 4)
    np.save(tmp_path / "x.npy", arr)
    ddx = flatten(ddstage, tmp_path / "blocks.ddx", tmp_path / "x.npy")
    data_at = (tmp_path / "x.npy").stat().st_size - arr.nbytes
    keep_mtime_flip(tmp_path / "x.npy", data_at + 20000 * 16 + 5)
    return ddx, arr


def assert_block_mismatch(proc):
    assert_clear(proc, ["checksum", "16384..32767"])
    assert proc.stdout in (b"", "")


def test_verify_finds_a_flipped_byte_in_a_multi_row_block(ddstage, serve, blocks, tmp_path):
    """Sample 20001 is intact, but its block (16384..32767) holds the flipped byte: read --verify,
    info --verify, load --verify (shards 0..19999 and 20000..39999 both cut that block, so each
    rank reads the other half from origin) and read --store --verify refuse it, naming the
    block; without verify the intact row reads right, and rows of other blocks verify.
    read --store --verify reads both halves from the store's live ranks, naming both, and still
    does once origin is gone."""
    ddx, arr = blocks
    assert ddstage.ok("read", ddx, "--ids", "20001", binary=True).stdout == arr[20001].tobytes()
    assert_block_mismatch(ddstage.run("read", ddx, "--ids", "20001", "--verify", binary=True))
    assert ddstage.ok("read", ddx, "--ids", "5,39999", "--verify", binary=True).stdout == arr[[5, 39999]].tobytes()
    info = ddstage.run("info", ddx, "--verify")
    assert info.returncode == 1 and "16384..32767" in info.stderr, info.stderr

    store = serve(2)
    assert_block_mismatch(ddstage.run("load", "--store", store.dir, ddx, "--name", "b", "--verify"))
    ddstage.ok("load", "--store", store.dir, ddx, "--name", "b")
    read = ["read", "--store", store.dir, "--dataset", "b"]
    assert ddstage.ok(*read, "--ids", "20001", binary=True).stdout == arr[20001].tobytes()
    for gone in (False, True):
        if gone:
            (tmp_path / "x.npy").unlink()
        for ids in ("20001", "19999"):  # rank 1's side of the block, and rank 0's
            proc = ddstage.run(*read, "--ids", ids, "--verify", binary=True)
            assert_clear(proc, ["checksum", "16384..32767", "read from rank 0 and rank 1"])
            assert proc.stdout == b""
        assert ddstage.ok(*read, "--ids", "5,39999", "--verify", binary=True).stdout == arr[[5, 39999]].tobytes()
    store.stop()
