"""`ddstage info`: the table and --json agree with the sources; --verify catches a flipped byte
that size and mtime cannot; --settings shows each value's origin (flag, env, file, default)."""
import json
import os
import resource

import h5py
import numpy as np
import pytest

from conftest import (assert_runtime_error, assert_usage_error, flatten, info_json,
                      keep_mtime_flip, pack_files, partials_beside, read_bytes, skip_if_sanitized)

N = 24


@pytest.fixture
def h5_dataset(ddstage, tmp_path):
    """Contiguous rows x float32[N,2,3], y int8[N] and a gzip field g (packed)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, 2, 3)).astype(np.float32)
    y = rng.integers(-100, 100, N).astype(np.int8)
    g = rng.integers(0, 1000, (N, 4)).astype(np.uint16)
    src = tmp_path / "train.h5"
    with h5py.File(src, "w") as f:
        f["data/x"] = x
        f["y"] = y
        f.create_dataset("g", data=g, chunks=(5, 4), compression="gzip")
    ddx = flatten(ddstage, tmp_path / "train.ddx", src, "--field", "/data/x", "--field", "label=/y",
                  "--field", "/g")
    return src, ddx, {"x": x, "label": y, "g": g}


def test_info_json(ddstage, h5_dataset):
    """--json parses and states samples, per-field dtype, shape, variable, row_bytes, source,
    total bytes, and the format."""
    src, ddx, arrays = h5_dataset
    info = info_json(ddstage, ddx)
    assert info["samples"] == N
    assert info["format"] == "hdf5"
    assert info["dataset"] == "train"
    assert info["total_bytes"] == sum(a.nbytes for a in arrays.values())
    assert info["source_files"] == 1
    assert info["pack_files"] == len(pack_files(ddx)) == 1
    fields = [(f["name"], f["dtype"], f["shape"], f["variable"], f["row_bytes"], f["source"])
              for f in info["fields"]]
    assert fields == [("x", "float32", [2, 3], False, 24, "/data/x"),
                      ("label", "int8", [], False, 1, "/y"),
                      ("g", "uint16", [4], False, 8, "/g")]
    for f in info["fields"]:
        assert f["bytes"] == arrays[f["name"]].nbytes
        # Fixed rows at a fixed stride (in place or packed in order) are runs, not entries.
        assert 1 <= f["runs"] <= f["blocks"] < N


def test_info_text(ddstage, h5_dataset):
    """The table names the dataset, sample count, format and each field with dtype, shape and
    bytes per row."""
    _, ddx, _ = h5_dataset
    text = ddstage.ok("info", ddx).stdout
    assert "train" in text and "hdf5" in text
    assert any(line.split()[:2] == ["samples", str(N)] for line in text.splitlines())
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert rows["x"][1:5] == ["float32", "[2,", "3]", "24"]
    assert rows["label"][1:4] == ["int8", "[]", "1"]
    assert rows["g"][1:4] == ["uint16", "[4]", "8"]
    index_line = next(line.split() for line in text.splitlines() if line.startswith("index "))
    assert index_line[2] == "runs," and index_line[4:6] == ["checksum", "blocks"]
    assert 3 <= int(index_line[1]) <= int(index_line[3]) < 3 * N  # one run per field at least


def test_info_variable_field(ddstage, tmp_path):
    """A variable field (file tree) says so: row_bytes 0, min/max row bytes from the data."""
    root = tmp_path / "t"
    root.mkdir()
    sizes = [5, 0, 17, 3]
    for i, s in enumerate(sizes):
        (root / f"{i}.bin").write_bytes(b"a" * s)
    info = info_json(ddstage, flatten(ddstage, tmp_path / "t.ddx", root))
    f = info["fields"][0]
    assert f["variable"] is True and f["row_bytes"] == 0
    assert (f["min_row_bytes"], f["max_row_bytes"], f["bytes"]) == (0, 17, sum(sizes))
    text = ddstage.ok("info", tmp_path / "t.ddx").stdout
    assert "[*]" in text and "0-17" in text


def test_verify_success(ddstage, h5_dataset):
    """--verify on intact data: exit 0, with any thread count, text and JSON."""
    _, ddx, _ = h5_dataset
    ddstage.ok("info", ddx, "--verify")
    ddstage.ok("info", ddx, "--verify", "--threads", "1")
    info = info_json(ddstage, ddx, "--verify", "--threads", "3")
    assert info["verify"]["entries"] == N * 3 and info["verify"]["failures"] == 0


def test_verify_when_threads_cannot_start(ddstage, h5_dataset):
    """--threads larger than the system will give (here: a 1 GiB address-space limit, so
    thread stacks run out) ends cleanly: either capped and exit 0, or one error line and
    exit 1; never 'terminate called' / SIGABRT."""
    _, ddx, _ = h5_dataset
    skip_if_sanitized(ddstage)

    def limit_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = ddstage.run("info", ddx, "--verify", "--threads", "1000", preexec_fn=limit_address_space)
    assert "terminate called" not in proc.stderr
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)
    if proc.returncode == 1:
        assert_runtime_error(proc, "thread")


def row_offset(src, path, row):
    with h5py.File(src, "r") as f:
        d = f[path]
        return d.id.get_offset() + row * d[0].nbytes


def test_verify_detects_flipped_bytes(ddstage, h5_dataset):
    """A byte flipped inside two samples' data, with size and mtime kept (so no staleness
    check can see it): --verify exits 1 naming the checksummed block of rows that holds each
    (here all N rows of a field: one run, one block) and its field; reads without --verify
    don't notice, reads with --verify of a row of that block fail naming the block."""
    src, ddx, arrays = h5_dataset
    block = f"block of samples 0..{N - 1}"
    keep_mtime_flip(src, row_offset(src, "/data/x", 17) + 5)
    keep_mtime_flip(src, row_offset(src, "/y", 4))
    proc = ddstage.run("info", ddx, "--verify")
    assert_runtime_error(proc, "verify", "sample 0")
    mismatches = sorted(l for l in proc.stderr.splitlines() if "mismatch" in l and not l.startswith("ddstage: error:"))
    assert len(mismatches) == 2, proc.stderr
    assert "field label" in mismatches[0] and block in mismatches[0]
    assert "field x" in mismatches[1] and block in mismatches[1]
    info = json.loads(ddstage.run("info", ddx, "--verify", "--json").stdout)
    assert info["verify"]["failures"] == 2
    assert sorted((f["sample"], f["field"]) for f in info["verify"]["first_failures"]) == [(0, "label"), (0, "x")]
    # Undamaged samples still read right; a row of a damaged block is an error naming it.
    assert read_bytes(ddstage, ddx, "16,18", field="x") == arrays["x"][[16, 18]].tobytes()
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "16", "--field", "x", "--verify"), "sample 16", block)
    assert len(read_bytes(ddstage, ddx, "17", field="x")) == 24


def test_verify_detects_damaged_pack(ddstage, h5_dataset):
    """A flipped byte in a pack file is found by --verify too (its block and field named)."""
    _, ddx, _ = h5_dataset
    pack = ddx / pack_files(ddx)[0]
    keep_mtime_flip(pack, 8 * 9 + 1)  # field g, sample 9 (8 bytes per row, one block of N)
    proc = ddstage.run("info", ddx, "--verify")
    assert_runtime_error(proc, "sample 0", "g")
    assert f"block of samples 0..{N - 1}" in proc.stderr


def test_stale_source(ddstage, h5_dataset, tmp_path):
    """A source that grew after flattening: info and read exit 1 naming the file; nothing is
    written to -o; --allow-stale (or DDSTAGE_ORIGIN_ALLOW_STALE) reads anyway."""
    src, ddx, arrays = h5_dataset
    with open(src, "ab") as f:
        f.write(b"\0")
    out = tmp_path / "out.bin"
    assert_runtime_error(ddstage.run("info", ddx), "train.h5", "changed")
    assert_runtime_error(ddstage.run("info", ddx, "--json"), "train.h5")
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0", "--field", "x", "-o", out), "train.h5", "changed")
    assert not out.exists() and partials_beside(out) == []
    ddstage.ok("info", ddx, "--allow-stale")
    assert ddstage.ok("read", ddx, "--ids", "3,1", "--field", "x", "--allow-stale",
                      binary=True).stdout == arrays["x"][[3, 1]].tobytes()
    assert ddstage.ok("read", ddx, "--ids", "3,1", "--field", "x", binary=True,
                      env={"DDSTAGE_ORIGIN_ALLOW_STALE": "true"}).stdout == arrays["x"][[3, 1]].tobytes()


def test_stale_by_mtime_only(ddstage, h5_dataset):
    """Same size, new mtime: still a changed source, exit 1 naming it."""
    src, ddx, _ = h5_dataset
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0", "--field", "x"), "train.h5")
    assert_runtime_error(ddstage.run("info", ddx), "train.h5")


def test_missing_source(ddstage, h5_dataset):
    """A source deleted after flattening: exit 1 naming it, for info and read."""
    src, ddx, _ = h5_dataset
    src.unlink()
    assert_runtime_error(ddstage.run("info", ddx), "train.h5", "missing")
    assert_runtime_error(ddstage.run("read", ddx, "--ids", "0", "--field", "x"), "train.h5")


# ---- settings ------------------------------------------------------------------------------

def settings_table(proc):
    """{key: (value, source)} from `info --settings`."""
    rows = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and ("." in parts[0] or parts[0] in ("threads", "progress")):
            rows[parts[0]] = (parts[1], parts[2])
    assert {"threads", "progress", "log.level", "flatten.pack_size", "flatten.memory",
            "origin.allow_stale"} <= set(rows), proc.stdout
    return rows


def test_settings_defaults(ddstage):
    """Without flags, env or file every setting comes from its default."""
    rows = settings_table(ddstage.ok("info", "--settings"))
    assert rows["threads"] == ("0", "default")
    assert rows["flatten.pack_size"] == ("256M", "default")
    assert rows["origin.allow_stale"] == ("false", "default")
    assert rows["fabric.domain"] == ("\"\"", "default")  # empty, printed so the columns stay apart
    assert all(src == "default" for _, src in rows.values()), rows


def test_settings_list_transports(ddstage):
    """`info --settings` lists the transport registry: each name, whether this node can use it
    and, when not, why (a build without libfabric says so)."""
    lines = ddstage.ok("info", "--settings").stdout.splitlines()
    build = next(line for line in lines if line.startswith("build:"))
    start = next(i for i, line in enumerate(lines) if line.startswith("transports"))
    rows = {line.split()[0]: line for line in lines[start + 1:] if line.startswith("  ")}
    assert list(rows) == ["shm", "mpi", "fabric"]
    assert rows["shm"].split()[1] == "available"
    assert rows["mpi"].split()[1] == ("available" if "MPI=1" in build else "unavailable")
    if "libfabric=0" in build:
        assert rows["fabric"].split()[1] == "unavailable" and "built without libfabric" in rows["fabric"]


def test_fabric_says_whether_the_transport_is_available(ddstage):
    """`info --fabric` ends with the registry's word on the fabric transport (and --json carries
    it); a build without libfabric refuses with the probe's reason."""
    env = {"DDSTAGE_FABRIC_PROVIDER": "tcp", "DDSTAGE_FABRIC_DOMAIN": "lo", "FI_TCP_IFACE": "lo"}
    settings = ddstage.ok("info", "--settings").stdout
    if "libfabric=0" in settings:
        assert_usage_error(ddstage.run("info", "--fabric", env=env), "built without libfabric")
        return
    proc = ddstage.run("info", "--fabric", env=env)
    if proc.returncode != 0:
        pytest.skip("no tcp provider on lo here: " + proc.stderr)
    assert proc.stdout.splitlines()[-1] == "transport fabric: available"
    info = json.loads(ddstage.ok("info", "--fabric", "--json", env=env).stdout)
    assert info["transport_available"] is True and info["transport_why_not"] == ""


def test_settings_precedence(ddstage, tmp_path):
    """flag > DDSTAGE_* env > --config file > default, each reported with its source."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("threads: 2\nflatten:\n  pack_size: 1M\n  memory: 8M\nprogress: never\n")
    env = {"DDSTAGE_THREADS": "3", "DDSTAGE_FLATTEN_MEMORY": "16M"}
    rows = settings_table(ddstage.ok("--config", cfg, "info", "--settings", env=env))
    assert rows["threads"] == ("3", "env")
    assert rows["flatten.memory"] == ("16M", "env")
    assert rows["flatten.pack_size"] == ("1M", "file")
    assert rows["progress"] == ("never", "file")
    assert rows["origin.allow_stale"] == ("false", "default")
    rows = settings_table(ddstage.ok("--config", cfg, "info", "--settings", "--threads", "5", env=env))
    assert rows["threads"] == ("5", "flag")


def test_default_config_file(ddstage, tmp_path):
    """$XDG_CONFIG_HOME/ddstage/config.yaml is read when no --config is given."""
    (tmp_path / "ddstage").mkdir()
    (tmp_path / "ddstage" / "config.yaml").write_text("threads: 7\n")
    rows = settings_table(ddstage.ok("info", "--settings", env={"XDG_CONFIG_HOME": str(tmp_path)}))
    assert rows["threads"] == ("7", "file")


def test_config_pack_size_takes_effect(ddstage, tmp_path):
    """flatten.pack_size from the config file really splits pack files; the flag overrides it."""
    root = tmp_path / "t"
    root.mkdir()
    for i in range(8):
        (root / f"{i}.bin").write_bytes(bytes([i]) * 1000)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("flatten:\n  pack_size: 2K\n")
    ddx = tmp_path / "a.ddx"
    ddstage.ok("--config", cfg, "flatten", root, "--pack", "-o", ddx)
    assert len(pack_files(ddx)) == 4
    ddstage.ok("--config", cfg, "flatten", root, "--pack", "--pack-size", "1M", "-o", tmp_path / "b.ddx")
    assert len(pack_files(tmp_path / "b.ddx")) == 1


@pytest.mark.parametrize("text,words", [
    ("bogus: 1\n", ["bogus"]),
    ("flatten:\n  packsize: 1M\n", ["flatten.packsize"]),
    ("threads: [1, 2\n", ["c.yaml"]),
    ("threads: many\n", ["threads"]),
    ("- a\n- b\n", ["c.yaml"]),
])
def test_bad_config_file(ddstage, tmp_path, text, words):
    """An unknown key, bad YAML or a bad value in the config file: exit 2 naming it."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    assert_usage_error(ddstage.run("--config", cfg, "info", "--settings"), *words)


def test_bad_settings_elsewhere(ddstage, tmp_path):
    """A missing --config file, a bad env value or a bad flag value: exit 2 naming it."""
    assert_usage_error(ddstage.run("--config", tmp_path / "none.yaml", "info", "--settings"), "none.yaml")
    assert_usage_error(ddstage.run("info", "--settings", env={"DDSTAGE_THREADS": "abc"}), "DDSTAGE_THREADS")
    assert_usage_error(ddstage.run("info", "--settings", "--threads", "-x"))
    np.save(tmp_path / "a.npy", np.zeros(3))
    assert_usage_error(ddstage.run("flatten", tmp_path / "a.npy", "--pack-size", "lots", "-o", tmp_path / "a.ddx"),
                       "lots")
    assert not (tmp_path / "a.ddx").exists()


def test_info_without_dataset(ddstage):
    """`info` with neither a dataset nor --settings is a usage error."""
    assert_usage_error(ddstage.run("info"))


def test_quiet_verbose_and_progress(ddstage, h5_dataset):
    """-q leaves only errors on stderr; by default --verify reports its verdict on stderr;
    a forced progress line (DDSTAGE_PROGRESS=always) goes to stderr and never into stdout,
    so --json output still parses; a bad log level is a usage error."""
    _, ddx, _ = h5_dataset
    assert ddstage.ok("-q", "info", ddx, "--verify").stderr == ""
    assert "verified" in ddstage.ok("info", ddx, "--verify").stderr
    proc = ddstage.ok("info", ddx, "--verify", "--json", env={"DDSTAGE_PROGRESS": "always"})
    assert json.loads(proc.stdout)["verify"]["failures"] == 0
    assert_usage_error(ddstage.run("info", "--settings", env={"DDSTAGE_LOG_LEVEL": "loud"}), "loud")
    assert_usage_error(ddstage.run("info", ddx, "--verify", env={"DDSTAGE_PROGRESS": "sometimes"}),
                       "sometimes", "progress")
