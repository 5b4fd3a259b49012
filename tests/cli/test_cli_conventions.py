"""The CLI's own conventions (issue 18): -q prints only errors, --json says what was done,
`ddstage help CMD` is `CMD --help`, `read -o x.npy` writes a real .npy, no binary goes to a
terminal unasked, and sizes are binary units everywhere (shown as KiB/MiB/GiB, typed either
way)."""
import json
import os
import pty
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import assert_usage_error, flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_store import serve  # noqa: E402,F401  (the store fixture)

N = 17
RECORD = np.dtype([("id", "<i4"), ("score", "<f8"), ("tag", "S5"), ("patch", "<f4", (2, 3))])
ALIGNED = np.dtype([("a", "i1"), ("b", "<f8"), ("c", "<i2")], align=True)  # padding inside


@pytest.fixture
def typed(ddstage, tmp_path):
    """An HDF5 file of the element types a .npy must carry, flattened; name -> array."""
    rng = np.random.default_rng(18)
    rec = np.zeros(N, RECORD)
    rec["id"], rec["score"] = rng.integers(-99, 99, N), rng.standard_normal(N)
    rec["tag"] = [b"ab", b"", b"hello"] * 5 + [b"x", b"y"]
    rec["patch"] = rng.standard_normal((N, 2, 3))
    aligned = np.zeros(N, ALIGNED)
    aligned["a"], aligned["b"], aligned["c"] = rng.integers(-9, 9, N), rng.random(N), np.arange(N)
    arrays = {
        "x": rng.standard_normal((N, 3, 2)).astype(np.float32),
        "label": np.arange(N, dtype=np.int64),
        "z": (rng.standard_normal((N, 2)) + 1j * rng.standard_normal((N, 2))).astype(np.complex64),
        "s": np.array([b"img_%d.jpg" % i for i in range(N)], dtype="S12"),
        "rec": rec,
        "aligned": aligned,
    }
    with h5py.File(tmp_path / "t.h5", "w") as f:
        for name, a in arrays.items():
            f[name] = a
    flatten(ddstage, tmp_path / "t.ddx", tmp_path / "t.h5", *[f"--field={n}=/{n}" for n in arrays])
    return tmp_path / "t.ddx", arrays


# ---- 4. read -o x.npy -------------------------------------------------------------------------

def test_read_npy_loads_as_the_source_array(ddstage, typed, tmp_path):
    ddx, arrays = typed
    ids = [5, 0, 16, 5, 3]
    for name, want in arrays.items():
        out = tmp_path / f"{name}.npy"
        ddstage.ok("read", ddx, "--field", name, "--ids", "5,0,16,5,3", "-o", out)
        got = np.load(out)
        want = want[ids]
        assert got.shape == want.shape, name
        if want.dtype.names:
            assert got.dtype.names == want.dtype.names and got.dtype.itemsize == want.dtype.itemsize
            for member in want.dtype.names:
                assert np.array_equal(got[member], want[member]), (name, member)
        else:
            assert got.dtype == want.dtype, name
            assert np.array_equal(got, want), name


def test_read_npy_refuses_a_variable_field_and_leaves_no_file(ddstage, gen, tmp_path):
    gen.ok("files", tmp_path / "tree", "--samples", "5", "--min-bytes", "1", "--max-bytes", "90")
    ddx = flatten(ddstage, tmp_path / "tree.ddx", tmp_path / "tree")
    field = json.loads(ddstage.ok("info", ddx, "--json").stdout)["fields"][0]["name"]
    out = tmp_path / "v.npy"
    assert_usage_error(ddstage.run("read", ddx, "--ids", "0-4", "-o", out), field, "npy")
    assert not out.exists() and list(tmp_path.glob("v.npy*")) == []
    # Raw bytes of the same field still work.
    ddstage.ok("read", ddx, "--ids", "0-4", "-o", tmp_path / "v.bin")


@pytest.mark.parametrize("names", [["a\nb", "q'u\\o"], ["tab\there", "b\u00e4ck"], ["\u65e5\u672c", "x\x01y"]],
                         ids=["escapes", "latin-1", "utf-8"])
def test_read_npy_keeps_member_names_numpy_writes(ddstage, tmp_path, names):
    """numpy writes member names with repr()'s escapes, in latin-1 (format 1.0) or UTF-8 (3.0):
    flatten decodes them, and the .npy read writes loads with the same names."""
    source = np.zeros(3, dtype=[(names[0], "<i4"), (names[1], "<f4")])
    source[names[0]] = [1, 2, 3]
    source[names[1]] = [0.5, 1.5, 2.5]
    np.save(tmp_path / "n.npy", source)
    ddx = flatten(ddstage, tmp_path / "n.ddx", tmp_path / "n.npy")
    members = json.loads(ddstage.ok("info", ddx, "--json").stdout)["fields"][0]["members"]
    assert [m["name"] for m in members] == names
    ddstage.ok("read", ddx, "--ids", "0-2", "-o", tmp_path / "out.npy")
    got = np.load(tmp_path / "out.npy")
    assert got.dtype.names == tuple(names) and got.tobytes() == source.tobytes()


# ---- 5. no binary to a terminal ---------------------------------------------------------------

def run_on_pty(ddstage, *args):
    """Runs ddstage with a terminal as stdout; returns (exit code, stderr, what reached the tty)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([ddstage.path, *map(str, args)], stdout=slave, stderr=subprocess.PIPE,
                              text=True, timeout=120)
        os.close(slave)
        slave = -1
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            seen += chunk
        return proc.returncode, proc.stderr, seen
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_read_refuses_a_terminal_unless_told(ddstage, typed, tmp_path):
    ddx, _ = typed
    rc, err, seen = run_on_pty(ddstage, "read", ddx, "--field", "label", "--ids", "0-2")
    assert rc == 2 and "refusing to write binary samples to a terminal" in err and "-o -" in err
    assert seen == b""
    for stdout_name in ("/dev/stdout", "/dev/fd/1"):
        rc, err, seen = run_on_pty(ddstage, "read", ddx, "--field", "label", "--ids", "0-2", "-o", stdout_name)
        assert rc == 2 and "refusing to write binary samples to a terminal" in err and seen == b"", stdout_name
    rc, err, seen = run_on_pty(ddstage, "read", ddx, "--field", "label", "--ids", "0-2", "-o", "-")
    assert rc == 0, err
    assert len(seen) >= 24  # 3 int64 (a terminal may turn \n into \r\n)
    # Pipes, /dev/null and FIFOs are no terminals.
    assert len(ddstage.ok("read", ddx, "--field", "label", "--ids", "0-2", binary=True).stdout) == 24
    ddstage.ok("read", ddx, "--field", "label", "--ids", "0-2", "-o", "/dev/null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    ddstage.ok("read", ddx, "--field", "label", "--ids", "0-2", "-o", fifo)
    reader.join(timeout=30)
    assert got == [np.arange(3, dtype="<i8").tobytes()]


# ---- 2. --json ---------------------------------------------------------------------------------

def test_flatten_and_read_json(ddstage, gen, tmp_path):
    gen.ok("npy", tmp_path / "a.npy", "--samples", "10", "--shape", "4", "--dtype", "float32")
    out = ddstage.ok("flatten", tmp_path / "a.npy", "-o", tmp_path / "a.ddx", "--json").stdout
    doc = json.loads(out)
    assert doc["samples"] == 10 and doc["bytes_indexed"] == 160 and doc["output"].endswith("a.ddx")
    assert doc["seconds"] > 0 and doc["bytes_per_second"] > 0
    proc = ddstage.ok("read", tmp_path / "a.ddx", "--ids", "0-3", "-o", tmp_path / "r.bin", "--json",
                      "--verify")
    doc = json.loads(proc.stdout)
    assert (doc["source"], doc["samples"], doc["bytes"], doc["verified"]) == ("origin", 4, 64, True)
    assert doc["output_format"] == "raw" and (tmp_path / "r.bin").stat().st_size == 64
    # stdout carries the samples: --json there would corrupt them.
    for extra in ([], ["-o", "-"]):
        assert_usage_error(ddstage.run("read", tmp_path / "a.ddx", "--ids", "0", "--json", *extra),
                           "--json", "-o")


def test_info_settings_json(ddstage):
    doc = json.loads(ddstage.ok("info", "--settings", "--json",
                                env={"DDSTAGE_FLATTEN_PACK_SIZE": "8KiB"}).stdout)
    assert doc["settings"]["flatten.pack_size"] == {
        "value": "8KiB", "source": "env", "default": "256M",
        "environment": "DDSTAGE_FLATTEN_PACK_SIZE", "help": doc["settings"]["flatten.pack_size"]["help"]}
    assert doc["settings"]["threads"]["source"] == "default"
    assert "mpi" in doc["build"] and {t["name"] for t in doc["transports"]} >= {"shm"}


# ---- 1. -q --------------------------------------------------------------------------------------

def test_quiet_flatten_prints_nothing(ddstage, gen, tmp_path):
    gen.ok("npy", tmp_path / "a.npy", "--samples", "10", "--shape", "4", "--dtype", "float32")
    always = {"DDSTAGE_PROGRESS": "always", "DDSTAGE_LOG_LEVEL": "info"}
    loud = ddstage.ok("flatten", tmp_path / "a.npy", "-o", tmp_path / "a.ddx", env=always)
    assert "10 samples" in loud.stdout and "flatten:" in loud.stderr  # what -q must drop
    quiet = ddstage.ok("-q", "flatten", tmp_path / "a.npy", "-o", tmp_path / "b.ddx", env=always)
    assert (quiet.stdout, quiet.stderr) == ("", "")
    # Errors still show.
    assert_usage_error(ddstage.run("-q", "flatten", tmp_path / "nosuch.npy", "-o", tmp_path / "c.ddx"))
    # What a command exists to print still is.
    assert "samples" in ddstage.ok("-q", "info", tmp_path / "b.ddx").stdout


def test_store_commands_quiet_json_and_binary_sizes(ddstage, serve, gen, tmp_path):
    gen.ok("npy", tmp_path / "a.npy", "--samples", "64", "--shape", "1024", "--dtype", "float32")
    ddx = flatten(ddstage, tmp_path / "a.ddx", tmp_path / "a.npy")
    store = serve(0, args=["-q"])
    always = {"DDSTAGE_PROGRESS": "always"}
    q = ddstage.ok("-q", "wait", "--store", store.dir, "--timeout", "30s")
    assert (q.stdout, q.stderr) == ("", "")
    q = ddstage.ok("-q", "load", "--store", store.dir, ddx, "--name", "quiet", env=always)
    assert (q.stdout, q.stderr) == ("", "")
    doc = json.loads(ddstage.ok("load", "--store", store.dir, ddx, "--name", "j", "--verify", "--json",
                                "--mem-limit", "1GiB").stdout)
    assert (doc["name"], doc["samples"], doc["bytes"], doc["verified"]) == ("j", 64, 64 * 4096, True)
    loud = ddstage.ok("load", "--store", store.dir, ddx, "--name", "loud").stdout
    assert loud.startswith("loaded 'loud': 64 samples, 256.0 KiB in "), loud
    text = ddstage.ok("status", "--store", store.dir).stdout
    st = json.loads(ddstage.ok("status", "--store", store.dir, "--json").stdout)
    held = st["datasets"][0]["bytes_per_rank"][0]
    assert isinstance(held, int) and held >= 64 * 4096  # raw integers for programs
    assert f"bytes per rank:   {held / 1024:.1f} KiB" in text and " MB" not in text, text
    out = tmp_path / "s.npy"
    doc = json.loads(ddstage.ok("read", "--store", store.dir, "--dataset", "j", "--ids", "3,1",
                                "-o", out, "--json").stdout)
    assert (doc["source"], doc["output_format"], doc["bytes"]) == ("store", "npy", 8192)
    assert np.array_equal(np.load(out), np.load(tmp_path / "a.npy")[[3, 1]])
    q = ddstage.ok("-q", "stop", "--store", store.dir)
    assert (q.stdout, q.stderr) == ("", "")
    store.proc.wait(timeout=30)
    assert "serving" not in store.output()


def test_quiet_clean(ddstage):
    """clean works host-wide: run in a /dev/shm of its own, so no other test's leftovers go."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private /dev/shm")

    def clean(*args):
        script = 'mount -t tmpfs tmpfs /dev/shm && exec "$@"'
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                               "sh", ddstage.path, *args], capture_output=True, text=True, timeout=60)

    loud = clean("clean")
    assert loud.returncode == 0 and "nothing to clean" in loud.stdout, loud.stderr
    quiet = clean("-q", "clean")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    dry = clean("-q", "clean", "--dry-run")  # its list is what it is for
    assert dry.returncode == 0 and "nothing to clean" in dry.stdout


# ---- 3. help -----------------------------------------------------------------------------------

@pytest.mark.parametrize("words", [[], ["flatten"], ["read"], ["bench", "origin"]])
def test_help_cmd_is_cmd_help(ddstage, words):
    via_help = ddstage.run("help", *words)
    direct = ddstage.run(*words, "--help")
    assert via_help.returncode == 0 == direct.returncode, via_help.stderr
    assert via_help.stdout == direct.stdout and via_help.stdout.strip()


def test_help_unknown_command_is_a_usage_error(ddstage):
    assert_usage_error(ddstage.run("help", "nosuch"), "unknown command", "nosuch")
    assert_usage_error(ddstage.run("help", "bench", "nosuch"), "unknown command", "nosuch")


# ---- 6. sizes typed either way -----------------------------------------------------------------

@pytest.mark.parametrize("size", ["8K", "8KB", "8KiB", "8kib"])
def test_sizes_accept_k_kb_kib_alike(ddstage, gen, tmp_path, size):
    gen.ok("npy", tmp_path / "a.npy", "--samples", "16", "--shape", "256", "--dtype", "float32")
    ddstage.ok("flatten", tmp_path / "a.npy", "-o", tmp_path / "a.ddx", "--pack", "--pack-size", size)
    packs = sorted(p.stat().st_size for p in (tmp_path / "a.ddx").glob("pack-*.bin"))
    assert packs == [8192] * 2, packs  # 16 KiB of rows in 8 KiB packs: binary, whatever the spelling


def test_a_size_without_its_unit_letter_is_refused(ddstage, gen, tmp_path):
    assert_usage_error(ddstage.run("info", "--settings", env={"DDSTAGE_FLATTEN_PACK_SIZE": "8iB"}),
                       "8iB", "flatten.pack_size")
