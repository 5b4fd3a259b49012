"""Every bad input of issue 2: the exit code DESIGN.md assigns (2 usage, 1 runtime), exactly one
'ddstage: error:' line naming the problem, no stack dump, and nothing already staged lost: an
existing index at -o stays byte-identical and no '.NAME.ddx.tmp-*' directory is left."""
import resource
import shutil
import signal
import struct

import h5py
import numpy as np
import pytest

from conftest import (NOBODY, assert_runtime_error, assert_usage_error, flatten, pack_files, partials_beside,
                      read_bytes, require_setpriv, temp_dirs_beside, tree_snapshot, world_readable)


def make_good_index(ddstage, out):
    """A small, valid index at out (what a failed flatten must leave alone)."""
    src = out.parent / "good_src"
    src.mkdir(exist_ok=True)
    np.save(src / "good.npy", np.arange(12, dtype=np.int32).reshape(4, 3))
    return flatten(ddstage, out, src / "good.npy")


def assert_flatten_fails(ddstage, tmp_path, args, code, words, **kw):
    """flatten ARGS fails with code and words (1) over an existing index with --force: that
    index is untouched; (2) into a fresh path: nothing is created. No temp dirs either way."""
    check = assert_usage_error if code == 2 else assert_runtime_error
    existing = tmp_path / "existing.ddx"
    if not existing.exists():
        make_good_index(ddstage, existing)
    before = tree_snapshot(existing)
    check(ddstage.run("flatten", *args, "-o", existing, "--force", **kw), *words)
    assert tree_snapshot(existing) == before, "a failed flatten --force changed the existing index"
    assert temp_dirs_beside(existing) == []
    fresh = tmp_path / "fresh.ddx"
    check(ddstage.run("flatten", *args, "-o", fresh, **kw), *words)
    assert not fresh.exists()
    assert temp_dirs_beside(fresh) == []
    # The old index still works.
    assert read_bytes(ddstage, existing, "3,0") == np.arange(12, dtype=np.int32).reshape(4, 3)[[3, 0]].tobytes()


SUPPORTED = ["bool", "int8", "uint16", "int64", "float16", "float32", "float64"]


@pytest.fixture
def bad_h5(tmp_path):
    """One HDF5 file holding every shape of bad HDF5 input."""
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.zeros((5, 2), np.float32)
        f["b"] = np.zeros(6, np.int64)
        f["x"] = np.zeros((9, 4), np.float32)
        f["dec"] = np.array([0, 3, 2, 9], np.int64)
        f["past"] = np.array([0, 3, 5, 10], np.int64)
        f["ld"] = np.zeros(5, np.longdouble)
        f.create_dataset("ref", (5,), dtype=h5py.ref_dtype)
        f["cmp"] = np.zeros(5, dtype=[("p", [("u", "<i4")]), ("q", "<f4")])
        f["sc"] = np.float32(3)
        f["empty"] = np.zeros((0, 3), np.float32)
        f["samples/g1/x"] = np.zeros(3)
        f["samples/g1/y"] = np.zeros(1)
        f["samples/g2/x"] = np.zeros(3)
    return path


@pytest.mark.parametrize("args,words", [
    (["--field", "/nope"], ["/nope"]),
    (["--field", "/a", "--field", "/b"], ["/a", "/b", "first dimension"]),
    (["--ragged", "x=/x:/dec"], ["/dec", "monotonic"]),
    (["--ragged", "x=/x:/past"], ["/past", "/x"]),
    (["--ragged", "x=/x:/missing_ptr"], ["/missing_ptr"]),
    (["--field", "/ld"], ["/ld", "unsupported", "long double"]),
    (["--field", "/ref"], ["/ref", "unsupported", "reference"]),
    (["--field", "/cmp"], ["/cmp", "unsupported", "member 'p'", "records inside records"]),
    (["--field", "/sc"], ["/sc", "scalar"]),
    (["--field", "/empty"], ["no samples"]),
    (["--groups", "/nothing/*"], ["/nothing/*", "matches no"]),
    (["--groups", "/samples/*"], ["/samples/g2", "y"]),
    (["--field", "a=/a", "--field", "a=/x"], ["'a'"]),
    (["--field", "=/a"], ["--field", "=/a"]),
    (["--ragged", "x=/x"], ["--ragged", "x=/x"]),
    ([], ["--field", "--groups", "/a", "/x"]),  # says what to choose from
], ids=["missing-dataset", "first-dim-differs", "offsets-decrease", "offsets-past-end", "offsets-missing",
        "long-double-dtype", "reference-dtype", "nested-compound-dtype", "scalar-dataset", "zero-rows",
        "pattern-matches-nothing", "group-missing-field", "field-twice", "bad-field-syntax",
        "bad-ragged-syntax", "nothing-chosen"])
def test_bad_hdf5_input(ddstage, tmp_path, bad_h5, args, words):
    """Each bad HDF5 input is a usage error naming the dataset/pattern/group at fault."""
    assert_flatten_fails(ddstage, tmp_path, [bad_h5, *args], 2, words)


def test_not_an_hdf5_file(ddstage, tmp_path):
    """A file that is not HDF5, detected or forced with --format hdf5: exit 2 naming it."""
    (tmp_path / "fake.h5").write_bytes(b"this is not HDF5\n" * 100)
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "fake.h5", "--field", "/x"], 2, ["fake.h5", "HDF5"])
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "fake.h5", "--format", "hdf5", "--field", "/x"], 2,
                         ["fake.h5", "HDF5"])


def test_second_file_lacks_dataset(ddstage, tmp_path):
    """Several HDF5 files where a later one lacks a field: exit 2 naming that file."""
    for name, n in (("one.h5", 4), ("two.h5", 3)):
        with h5py.File(tmp_path / name, "w") as f:
            f["x"] = np.zeros(n, np.int16)
            if name == "one.h5":
                f["y"] = np.zeros(n, np.int8)
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "one.h5", tmp_path / "two.h5", "--field", "/x",
                                             "--field", "/y"], 2, ["/y", "two.h5"])


@pytest.mark.parametrize("kind", ["nested", "long-double", "object", "fortran", "scalar",
                                  "rows-differ", "garbage", "zero-rows"])
def test_bad_npy(ddstage, tmp_path, kind):
    """Unusable .npy files: exit 2 naming the file (and for dtypes, the supported ones)."""
    p = tmp_path / "bad.npy"
    words = ["bad.npy"]
    args = [p]
    if kind == "nested":
        np.save(p, np.zeros(6, dtype=[("a", "<i4"), ("b", [("c", "<f4")])]))
        words += ["member 'b'", "nested"]
    elif kind == "long-double":
        np.save(p, np.zeros(6, dtype=np.longdouble))
        words += ["unsupported", *SUPPORTED]
    elif kind == "object":
        np.save(p, np.array([1, "a"], dtype=object), allow_pickle=True)
        words += ["unsupported", "pickled"]
    elif kind == "fortran":
        np.save(p, np.asfortranarray(np.zeros((4, 3), np.float32)))
        words += ["fortran"]
    elif kind == "scalar":
        np.save(p, np.int32(5))
        words += ["scalar"]
    elif kind == "rows-differ":
        np.save(tmp_path / "ok.npy", np.zeros(6, np.int32))
        np.save(p, np.zeros(5, np.int32))
        args = [tmp_path / "ok.npy", p]
        words += ["ok.npy", "6", "5"]
    elif kind == "garbage":
        p.write_bytes(b"\x93NUMPY\x01\x00garbage")
        args = [p, "--format", "npy"]
    elif kind == "zero-rows":
        np.save(p, np.zeros((0, 3), np.float32))
        words = ["no samples", p.name, "0 rows"]
    assert_flatten_fails(ddstage, tmp_path, args, 2, words)


def test_empty_directory(ddstage, tmp_path):
    """A directory with no files (only empty subdirectories): exit 2 naming it."""
    (tmp_path / "empty" / "sub" / "deeper").mkdir(parents=True)
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "empty"], 2, ["empty", "no files"])
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "empty", "--format", "files", "--pack"], 2, ["empty"])


@pytest.mark.parametrize("fmt", ["auto", "hdf5", "npy", "files"])
def test_missing_source(ddstage, tmp_path, fmt):
    """A source path that does not exist: exit 2 naming it, whatever the format."""
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "nothere.xyz", "--format", fmt], 2, ["nothere.xyz"])


def test_missing_list_file(ddstage, tmp_path):
    """@LIST naming a missing list, or a list naming a missing file: exit 2 naming it."""
    assert_flatten_fails(ddstage, tmp_path, [f"@{tmp_path / 'nolist.txt'}", "--format", "files"], 2,
                         ["nolist.txt"])
    (tmp_path / "list.txt").write_text("gone.bin\n")
    assert_flatten_fails(ddstage, tmp_path, [f"@{tmp_path / 'list.txt'}", "--format", "files"], 2, ["gone.bin"])


def test_unknown_format(ddstage, tmp_path):
    """--format xyz: exit 2 naming it and the formats this build has."""
    np.save(tmp_path / "a.npy", np.zeros(3))
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "a.npy", "--format", "xyz"], 2,
                         ["xyz", "hdf5", "npy", "files"])


def test_undetectable_format(ddstage, tmp_path):
    """A plain file auto-detection cannot place: exit 2 naming it and asking for --format."""
    (tmp_path / "data.bin").write_bytes(b"\x01\x02\x03")
    assert_flatten_fails(ddstage, tmp_path, [tmp_path / "data.bin"], 2, ["data.bin", "--format"])


def test_dangling_link_is_a_missing_dataset(ddstage, tmp_path):
    """--field naming a soft link to nowhere is a missing dataset: exit 2 naming the path
    (not a runtime 'H5Oopen failed')."""
    src = tmp_path / "l.h5"
    with h5py.File(src, "w") as f:
        f["x"] = np.zeros(4, np.int16)
        f["alias"] = h5py.SoftLink("/x")
        f["dangling"] = h5py.SoftLink("/nowhere")
    ddx = flatten(ddstage, tmp_path / "ok.ddx", src, "--field", "a=/alias")  # a good link is followed
    assert read_bytes(ddstage, ddx, "0-3") == np.zeros(4, np.int16).tobytes()
    assert_flatten_fails(ddstage, tmp_path, [src, "--field", "/dangling"], 2, ["/dangling"])


# ---- unreadable sources (run as an unprivileged user) --------------------------------------

@pytest.mark.parametrize("kind", ["files", "npy", "hdf5", "directory"])
def test_unreadable_source(ddstage, world_dir, kind):
    """A source the user cannot read: exit 2 (man ddstage-flatten: 'a source that is missing,
    unreadable, ...'), one line naming the file; the existing index is untouched and no temp
    dir is left. Root ignores file modes, so ddstage runs as uid 65534 here."""
    require_setpriv()
    tree = world_dir / "tree"
    for i in range(4):
        (tree / "sub").mkdir(parents=True, exist_ok=True)
        (tree / "sub" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    np.save(world_dir / "a.npy", np.zeros((4, 2), np.float32))
    with h5py.File(world_dir / "a.h5", "w") as f:
        f["x"] = np.zeros(4, np.int32)
    world_readable(world_dir)
    sources = {"files": ([tree], tree / "sub" / "2.bin"),
               "npy": ([world_dir / "a.npy"], world_dir / "a.npy"),
               "hdf5": ([world_dir / "a.h5", "--field", "/x"], world_dir / "a.h5"),
               "directory": ([tree], tree / "sub")}
    args, locked = sources[kind]
    existing = make_good_index(ddstage, world_dir / "existing.ddx")
    world_readable(world_dir)
    locked.chmod(0)
    before = tree_snapshot(existing)
    env = {"HOME": str(world_dir), "XDG_CONFIG_HOME": str(world_dir / "xdg")}
    proc = ddstage.run("flatten", *args, "-o", existing, "--force", prefix=NOBODY, env=env)
    assert proc.returncode != 0 and "terminate called" not in proc.stderr
    assert_usage_error(proc, locked.name)
    assert tree_snapshot(existing) == before
    assert temp_dirs_beside(existing) == []
    fresh = world_dir / "fresh.ddx"
    assert_usage_error(ddstage.run("flatten", *args, "-o", fresh, prefix=NOBODY, env=env), locked.name)
    assert not fresh.exists() and temp_dirs_beside(fresh) == []


# ---- the output --------------------------------------------------------------------------

def test_output_exists_without_force(ddstage, tmp_path):
    """An existing index at -o without --force: exit 2 naming it and --force; untouched."""
    existing = make_good_index(ddstage, tmp_path / "existing.ddx")
    before = tree_snapshot(existing)
    np.save(tmp_path / "new.npy", np.ones(9, np.uint8))
    assert_usage_error(ddstage.run("flatten", tmp_path / "new.npy", "-o", existing), "existing.ddx", "--force")
    assert tree_snapshot(existing) == before
    assert temp_dirs_beside(existing) == []


def test_force_never_replaces_a_non_index(ddstage, tmp_path):
    """--force refuses a path that is not an index (a plain file, a directory of other
    files): exit 2, the path untouched."""
    np.save(tmp_path / "new.npy", np.ones(9, np.uint8))
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    assert_usage_error(ddstage.run("flatten", tmp_path / "new.npy", "-o", plain, "--force"), "notes.txt")
    assert plain.read_text() == "keep me"
    d = tmp_path / "mydir"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    assert_usage_error(ddstage.run("flatten", tmp_path / "new.npy", "-o", d, "--force"), "mydir")
    assert (d / "thesis.tex").read_text() == "precious" and len(list(d.iterdir())) == 1
    assert temp_dirs_beside(plain) == [] and temp_dirs_beside(d) == []


def test_output_parent_missing(ddstage, tmp_path):
    """-o in a directory that does not exist: exit 2 naming it; nothing created."""
    np.save(tmp_path / "a.npy", np.ones(3))
    assert_usage_error(ddstage.run("flatten", tmp_path / "a.npy", "-o", tmp_path / "no" / "a.ddx"), "no")
    assert not (tmp_path / "no").exists()


def test_force_replaces_on_success(ddstage, tmp_path):
    """--force with good input replaces the index with the new one, leaving no temp dir."""
    existing = make_good_index(ddstage, tmp_path / "existing.ddx")
    new = np.arange(7, dtype=np.float64)
    np.save(tmp_path / "new.npy", new)
    flatten(ddstage, existing, tmp_path / "new.npy", "--force")
    assert read_bytes(ddstage, existing, "0-6") == new.tobytes()
    assert temp_dirs_beside(existing) == []


def limit_file_size(nbytes):
    """preexec_fn: a file size limit, with SIGXFSZ ignored so writes fail with EFBIG."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


@pytest.mark.parametrize("source", ["files", "hdf5-deflate", "hdf5-pack"])
def test_out_of_space_while_packing(ddstage, gen, tmp_path, source):
    """Writes failing mid-pack (RLIMIT_FSIZE, like a full disk): exit 1, one error line, the
    previous index intact, no temp dir, no new index."""
    if source == "files":
        gen.ok("files", tmp_path / "tree", "--samples", 200, "--min-bytes", 2000, "--max-bytes", 4000)
        args = [tmp_path / "tree", "--pack"]
    else:
        gen.ok("hdf5-rows", tmp_path / "a.h5", "--samples", 400, "--shape", "32,32",
               *(["--deflate"] if source == "hdf5-deflate" else []))
        args = [tmp_path / "a.h5", "--field", "/features", "--field", "/labels"]
        if source == "hdf5-pack":
            args.append("--pack")
    assert_flatten_fails(ddstage, tmp_path, args, 1, [], preexec_fn=limit_file_size(200_000))
    # Without the limit the same command works: the failure was the space, not the input.
    flatten(ddstage, tmp_path / "ok.ddx", *args)
    assert pack_files(tmp_path / "ok.ddx")


# ---- damaged indexes ---------------------------------------------------------------------

def damage(ddx, how):
    path = ddx / "index.bin"
    data = bytearray(path.read_bytes())
    if how == "truncated-tail":
        data = data[:-8]
    elif how == "truncated-header":
        data = data[:40]
    elif how == "empty":
        data = b""
    elif how == "flip-entry":
        data[128 + 8 + 1] ^= 0x01  # offset of entry 0
    elif how == "flip-header":
        data[16] ^= 0x01  # sample count
    elif how == "flip-names":
        data[-9] ^= 0x20
    elif how == "padded":
        data += b"\0" * 8
    elif how == "newer-index":
        struct.pack_into("<I", data, 8, 99)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how,words", [
    ("truncated-tail", ["index.bin", "truncated"]),
    ("truncated-header", ["index.bin", "truncated"]),
    ("empty", ["index.bin"]),
    ("padded", ["index.bin"]),
    ("flip-entry", ["index.bin", "corrupt"]),
    ("flip-header", ["index.bin", "corrupt"]),
    ("flip-names", ["index.bin", "corrupt"]),
    ("newer-index", ["index.bin", "newer"]),
])
def test_damaged_index_bin(ddstage, tmp_path, how, words):
    """A truncated, padded, bit-flipped or newer-version index.bin: info, read and bench
    origin exit 1 naming the file and the damage; read -o writes nothing."""
    ddx = make_good_index(ddstage, tmp_path / "d.ddx")
    damage(ddx, how)
    assert_runtime_error(ddstage.run("info", ddx), *words)
    assert_runtime_error(ddstage.run("info", ddx, "--verify"), *words)
    out = tmp_path / "out.bin"
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0", "-o", out), *words)
    assert not out.exists() and partials_beside(out) == []
    assert_runtime_error(ddstage.run("bench", "origin", ddx, "--samples", "5"), *words)


def edit_manifest(ddx, old, new):
    path = ddx / "manifest.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old,new,words", [
    ("format_version: 1", "format_version: 99", ["newer", "99"]),
    ("samples: 4", "samples: 5", ["manifest.yaml", "index.bin"]),
    ("dtype: int32", "dtype: int33", ["manifest.yaml", "dtype"]),
    ("format_version: 1", "format_version: [", ["manifest.yaml"]),
    ("format_version: 1\n", "", ["manifest.yaml", "format_version"]),
])
def test_damaged_manifest(ddstage, tmp_path, old, new, words):
    """A manifest from a newer format version, one that disagrees with index.bin, or one that
    is damaged: exit 1 naming the problem, for info and read."""
    ddx = make_good_index(ddstage, tmp_path / "d.ddx")
    edit_manifest(ddx, old, new)
    assert_runtime_error(ddstage.run("info", ddx), *words)
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0"), *words)


def test_missing_pack_file(ddstage, tmp_path):
    """A pack file removed from an index: reads of its samples exit 1 naming it."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "a.bin").write_bytes(b"abc")
    ddx = flatten(ddstage, tmp_path / "p.ddx", root, "--pack")
    (ddx / "pack-00000.bin").unlink()
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0"), "pack-00000.bin")


# ---- the command line itself ------------------------------------------------------------

@pytest.mark.parametrize("cmd", [[], ["flatten"], ["info"], ["read"], ["bench"], ["bench", "origin"],
                                 ["bench", "flatten"]])
def test_help_exits_zero(ddstage, cmd):
    """--help on ddstage and on every (sub)command: exit 0, usage on stdout, no error."""
    proc = ddstage.run(*cmd, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "ddstage: error" not in proc.stderr


def test_version(ddstage):
    """--version: exit 0 and 'ddstage X.Y.Z'."""
    proc = ddstage.run("--version")
    assert proc.returncode == 0
    name, version = proc.stdout.split()
    assert name == "ddstage" and len(version.split(".")) == 3


@pytest.mark.parametrize("args,words", [
    ([], []),
    (["frobnicate"], ["frobnicate"]),
    (["flatten", "--no-such-flag", "x", "-o", "y"], ["--no-such-flag"]),
    (["flatten", "x"], ["--output"]),
    (["read", "some.ddx"], ["--ids"]),
    (["info", "--threads"], ["--threads"]),
    (["bench"], []),
])
def test_bad_command_lines(ddstage, args, words):
    """Bad flags, missing required options, unknown subcommands: exit 2, one error line naming
    the offending word (an unknown subcommand is named, not reported as a missing one)."""
    assert_usage_error(ddstage.run(*args), *words)
