"""`ddstage read`: the --ids grammar (order kept, repeats, ranges, @FILE), stdout and -o give
the same bytes, --verify, and -o never leaves a partial file."""
import resource
import signal

import numpy as np
import pytest

from conftest import (assert_runtime_error, assert_usage_error, expand_ids, flatten, partials_beside, read_bytes,
                      read_bytes_to_file, rows_bytes)

N = 50


@pytest.fixture(scope="module")
def npy_dataset(ddstage, tmp_path_factory):
    """A two-field npy dataset of N rows (fixed sizes) and its arrays."""
    d = tmp_path_factory.mktemp("read")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, 3, 5)).astype(np.float32)
    y = np.arange(N, dtype=np.int64) * 3 + 1
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    return flatten(ddstage, d / "xy.ddx", d / "x.npy", d / "y.npy"), {"x": x, "y": y}


@pytest.mark.parametrize("spec", [
    "0", "49", "7,3,7,3", "10-19", "19-19", "40-49,0-4,45-47", "5,0-2,5,49,1-1,0",
    " 4 , 2 ,3- 5",  # whitespace around items is tolerated
])
def test_ids_spec(ddstage, npy_dataset, spec):
    """Each --ids form names the ids the contract says, in the order given, repeats kept."""
    ddx, arrays = npy_dataset
    ids = expand_ids(spec.replace(" ", ""))
    for field, arr in arrays.items():
        assert read_bytes(ddstage, ddx, spec, field=field) == rows_bytes(arr, ids)


def test_ids_from_file(ddstage, npy_dataset, tmp_path):
    """--ids @FILE: one id or range per line, blank lines and # comments skipped, CRLF ok."""
    ddx, arrays = npy_dataset
    rng = np.random.default_rng(5)
    ids = [int(i) for i in rng.integers(0, N, 300)]
    lines = ["# batch 1", ""] + [str(i) for i in ids[:150]] + ["12-15", "  ", "# more"] + \
        [f"{i}\r" for i in ids[150:]]
    (tmp_path / "ids.txt").write_text("\n".join(lines) + "\n")
    want_ids = ids[:150] + [12, 13, 14, 15] + ids[150:]
    assert read_bytes(ddstage, ddx, f"@{tmp_path / 'ids.txt'}", field="x") == rows_bytes(arrays["x"], want_ids)


def test_stdout_and_output_file_agree(ddstage, npy_dataset, tmp_path):
    """-o FILE holds exactly what stdout gets; an existing FILE is replaced; '-' is stdout."""
    ddx, arrays = npy_dataset
    out = tmp_path / "out.bin"
    out.write_bytes(b"old contents that are longer than the new ones" * 100)
    spec = "3,1,4,1,5,9,2,6"
    got = read_bytes_to_file(ddstage, ddx, spec, out, field="y")
    assert got == read_bytes(ddstage, ddx, spec, field="y") == rows_bytes(arrays["y"], expand_ids(spec))
    dash = ddstage.ok("read", ddx, "--ids", spec, "--field", "y", "-o", "-", binary=True).stdout
    assert dash == got


def test_verify_passes_on_good_data(ddstage, npy_dataset):
    """--verify checks every checksum and still returns the same bytes."""
    ddx, arrays = npy_dataset
    proc = ddstage.ok("read", ddx, "--ids", f"0-{N - 1}", "--field", "x", "--verify", binary=True)
    assert proc.stdout == arrays["x"].tobytes()


def test_large_read_spans_batches(ddstage, tmp_path):
    """A read bigger than one internal batch (64 MiB) stays exact and in order."""
    arr = np.arange(3 * 1024 * 1024, dtype=np.uint32).reshape(96, -1)  # 128 KiB rows, 12 MiB
    np.save(tmp_path / "big.npy", arr)
    ddx = flatten(ddstage, tmp_path / "big.ddx", tmp_path / "big.npy")
    ids = list(range(95, -1, -1)) * 6  # 72 MiB, reversed, repeated
    (tmp_path / "ids.txt").write_text("\n".join(map(str, ids)))
    got = read_bytes_to_file(ddstage, ddx, f"@{tmp_path / 'ids.txt'}", tmp_path / "o.bin")
    assert len(got) == len(ids) * arr[0].nbytes
    assert got == rows_bytes(arr, ids)


def limit_file_size(nbytes):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


def test_failed_write_leaves_no_partial_output(ddstage, npy_dataset, tmp_path):
    """A write that fails (file size limit: EFBIG) is a runtime error; FILE keeps its old
    contents and no FILE.partial is left behind."""
    ddx, _ = npy_dataset
    out = tmp_path / "out.bin"
    out.write_bytes(b"precious")
    proc = ddstage.run("read", ddx, "--ids", f"0-{N - 1}", "--field", "x", "-o", out,
                       preexec_fn=limit_file_size(1000))
    assert_runtime_error(proc)
    assert out.read_bytes() == b"precious"
    assert partials_beside(out) == []


@pytest.mark.parametrize("spec,words", [
    ("50", ["50", "out of range"]),
    ("0,1,99", ["99", "out of range"]),
    ("48-50", ["50", "out of range"]),
    ("abc", ["abc"]),
    ("1,,2", ["bad id"]),
    ("3-", ["bad id"]),
    ("-1", ["bad id"]),
    ("1.5", ["1.5"]),
    ("0x10", ["0x10"]),
    ("+3", ["+3"]),
    ("99999999999999999999", ["99999999999999999999"]),
    ("9-2", ["9-2", "range"]),
    ("", []),
])
def test_bad_ids_are_usage_errors(ddstage, npy_dataset, tmp_path, spec, words):
    """A malformed, reversed or out-of-range --ids is exit 2 naming the bad item, and nothing
    is written: no -o file, no .partial, nothing on stdout."""
    ddx, _ = npy_dataset
    out = tmp_path / "out.bin"
    proc = ddstage.run("read", ddx, "--ids", spec, "--field", "y", "-o", out)
    assert_usage_error(proc, *words)
    assert not out.exists() and partials_beside(out) == []
    proc = ddstage.run("read", ddx, "--ids", spec, "--field", "y", binary=True)
    assert proc.returncode == 2 and proc.stdout == b""


def test_bad_ids_file(ddstage, npy_dataset, tmp_path):
    """@FILE problems are usage errors naming the file (and the line), nothing written."""
    ddx, _ = npy_dataset
    out = tmp_path / "out.bin"
    assert_usage_error(ddstage.run("read", ddx, "--ids", f"@{tmp_path / 'missing.txt'}", "--field", "y",
                                   "-o", out), "missing.txt")
    (tmp_path / "bad.txt").write_text("1\n2\nseven\n")
    assert_usage_error(ddstage.run("read", ddx, "--ids", f"@{tmp_path / 'bad.txt'}", "--field", "y",
                                   "-o", out), "seven", "bad.txt:3")
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    assert_usage_error(ddstage.run("read", ddx, "--ids", f"@{tmp_path / 'empty.txt'}", "--field", "y",
                                   "-o", out), "no sample")
    assert not out.exists()


def test_field_required_when_several(ddstage, npy_dataset, tmp_path):
    """Without --field on a multi-field dataset: exit 2 listing the fields; an unknown
    --field: exit 2 naming it and listing the fields. Nothing written."""
    ddx, _ = npy_dataset
    out = tmp_path / "out.bin"
    assert_usage_error(ddstage.run("read", ddx, "--ids", "0", "-o", out), "--field", "x", "y")
    assert_usage_error(ddstage.run("read", ddx, "--ids", "0", "--field", "nope", "-o", out), "nope", "x, y")
    assert not out.exists()


def test_read_of_missing_index(ddstage, tmp_path):
    """A dataset path that is not an index is a usage error naming it."""
    assert_usage_error(ddstage.run("read", tmp_path / "none.ddx", "--ids", "0"), "none.ddx")
    (tmp_path / "dir.ddx").mkdir()
    assert_usage_error(ddstage.run("read", tmp_path / "dir.ddx", "--ids", "0"), "dir.ddx", "manifest")


def limit_open_files(n):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


def test_more_source_files_than_descriptors(ddstage, gen, tmp_path):
    """A file tree with more files than the process may hold open (RLIMIT_NOFILE 128 here,
    1024 by default on most systems; a real image tree has millions) flattens, reads,
    verifies and benches correctly: the descriptor cache must stay bounded."""
    root = tmp_path / "tree"
    gen.ok("files", root, "--samples", 300, "--min-bytes", 1, "--max-bytes", 40)
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: str(p.relative_to(root)))
    few_fds = limit_open_files(128)
    ddx = flatten(ddstage, tmp_path / "t.ddx", root, preexec_fn=few_fds)
    failures = []
    proc = ddstage.run("read", ddx, "--ids", "0-299", "-o", tmp_path / "all.bin", preexec_fn=few_fds)
    if proc.returncode != 0:
        failures.append(f"read: {proc.stderr.strip()}")
    else:
        assert (tmp_path / "all.bin").read_bytes() == b"".join(p.read_bytes() for p in files)
    proc = ddstage.run("info", ddx, "--verify", "--threads", "2", preexec_fn=few_fds)
    if proc.returncode != 0:
        failures.append(f"info --verify: {proc.stderr.strip().splitlines()[-1]}")
    proc = ddstage.run("bench", "origin", ddx, "--samples", "500", preexec_fn=few_fds)
    if proc.returncode != 0:
        failures.append(f"bench origin: {proc.stderr.strip().splitlines()[-1]}")
    assert failures == []


def test_output_is_a_directory(ddstage, npy_dataset, tmp_path):
    """-o naming an existing directory is the user's mistake: exit 2 naming it, no
    'internal error', the directory and its contents untouched, no .partial left."""
    ddx, _ = npy_dataset
    d = tmp_path / "outdir"
    d.mkdir()
    (d / "keep").write_text("k")
    assert_usage_error(ddstage.run("read", ddx, "--ids", "0", "--field", "y", "-o", d), "outdir")
    assert "internal error" not in ddstage.run("read", ddx, "--ids", "0", "--field", "y", "-o", d).stderr
    assert [p.name for p in d.iterdir()] == ["keep"]
    assert partials_beside(d) == []
