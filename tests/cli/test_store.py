"""The served store end to end: real `ddstage serve` processes under mpiexec (4 ranks on 2
cores), real clients, byte-for-byte against origin reads, and the failure cases of issue 3.
Every test stops or kills what it started and checks that no process and no shared-memory
segment is left behind."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import (assert_runtime_error, assert_usage_error, flatten, random_spec, read_bytes)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import STARTUPS, timed  # noqa: E402
from local_mpi import MPI_ENV, pid_alive  # noqa: E402

# A hang bound, not a deadline: 4 ASan ranks beside a CPU hog and the rest of the ASan pass
# took over 60 s to start (the deadlines tests assert scale with the start measured here).
START_TIMEOUT_S = 180
READ_TIMEOUT_S = 10


class Store:
    """One `ddstage serve` job. The process group is ours: kill() ends every rank."""

    def __init__(self, ddstage, directory, ranks, args=(), env=None, mpiexec_args=()):
        self.ddstage = ddstage
        self.dir = Path(directory)
        cmd = [ddstage.path, "serve", "--store", str(self.dir), "--listen", "127.0.0.1:0", *args]
        if ranks:
            cmd = ["mpiexec", *mpiexec_args, "-n", str(ranks)] + cmd
        self.log = open(self.dir.parent / f"{self.dir.name}.log", "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **MPI_ENV, **(env or {})}, start_new_session=True)
        started = time.monotonic()
        while not (self.dir / "store.yaml").exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.output()}")
            assert time.monotonic() < started + START_TIMEOUT_S, \
                "serve did not write store.yaml in time:\n" + self.output()
            time.sleep(0.05)
        # The baseline a test's deadlines scale with: how fast this machine starts a job now.
        self.start_s = time.monotonic() - started
        self.descriptor = yaml.safe_load((self.dir / "store.yaml").read_text())
        self.prefix = "ddstage-" + self.descriptor["id"]

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def wait_output(self, text, timeout=10):
        """mpiexec forwards the ranks' stderr asynchronously: poll for a line (bounded)."""
        deadline = time.monotonic() + timeout
        while text not in self.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.output()

    def segments(self):
        return sorted(p.name for p in Path("/dev/shm").glob(self.prefix + "-*"))

    def within(self, configured_s=0.0):
        """A deadline: a configured wait (timeouts, OpenMPI's kill sequence) plus what ending and
        reaping processes costs this machine now, scaled by this job's start-up."""
        return configured_s + STARTUPS * self.start_s

    def pids(self):
        return [r["pid"] for r in yaml.safe_load((self.dir / "store.yaml").read_text())["ranks"]]

    def stop(self):
        proc = self.ddstage.run("stop", "--store", self.dir)
        assert proc.returncode == 0, proc.stderr
        assert self.proc.wait(timeout=30) == 0, self.output()
        assert not (self.dir / "store.yaml").exists()

    def kill(self):
        """SIGKILL the whole job and wait (bounded) until every rank is dead. The ranks too: mpiexec
        puts them in process groups of their own, and once serving they outlive it by a moment
        (they end when they see it gone), freeing what a SIGKILL would leave."""
        pids = self.pids() if (self.dir / "store.yaml").exists() else []
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        assert wait_dead(pids)


def wait_dead(pids, timeout=15):
    """True once no pid runs (bounded): ranks can outlive mpiexec by a moment."""
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(pid_alive(p) for p in pids)


@pytest.fixture
def serve(ddstage, tmp_path):
    """serve(ranks=4) starts a store; at the end every one is stopped or killed, and its ranks
    and segments must be gone."""
    started = []

    def start(ranks=4, name="store", args=(), env=None, mpiexec_args=()):
        """mpiexec_args: e.g. ["--enable-recovery"], so that a rank's end is not the job's."""
        store = Store(ddstage, tmp_path / name, ranks, args, env, mpiexec_args)
        started.append(store)
        return store

    yield start
    for store in started:
        pids = store.pids() if (store.dir / "store.yaml").exists() else []
        if store.proc.poll() is None:
            ddstage.run("stop", "--store", store.dir)
            try:
                store.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                store.kill()
        store.kill()
        assert store.segments() == [], "shared memory left behind"
        assert wait_dead(pids), "server ranks left behind"


@pytest.fixture
def datasets(ddstage, gen, tmp_path):
    """A fixed-row HDF5 dataset (x: 3 KB rows, y: labels) and a variable-size file tree."""
    gen.ok("hdf5-rows", tmp_path / "rows.h5", "--samples", "500", "--shape", "768", "--dtype", "float32")
    rows = flatten(ddstage, tmp_path / "rows.ddx", tmp_path / "rows.h5", "--field", "x=/features",
                   "--field", "y=/labels")
    gen.ok("files", tmp_path / "tree", "--samples", "300", "--min-bytes", "1", "--max-bytes", "9000")
    files = flatten(ddstage, tmp_path / "files.ddx", tmp_path / "tree")
    return {"rows": rows, "files": files}


def status(ddstage, store_dir):
    return json.loads(ddstage.ok("status", "--store", store_dir, "--json").stdout)


def read_store(ddstage, store_dir, name, spec, field=None, *extra):
    args = ["read", "--store", store_dir, "--dataset", name, "--ids", spec, *extra]
    return ddstage.ok(*(args + (["--field", field] if field else [])), binary=True).stdout


def test_serve_load_read_status_stop(ddstage, serve, datasets):
    """4 ranks: both datasets load, every rank holds a share, random batches (unsorted, with
    repeats) equal the origin bytes, and stop leaves nothing behind."""
    store = serve(4)
    out = ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "rows", "--verify").stdout
    assert "loaded 'rows': 500 samples" in out and "verified" in out
    ddstage.ok("load", "--store", store.dir, datasets["files"])
    st = status(ddstage, store.dir)
    assert [r["rank"] for r in st["ranks"]] == [0, 1, 2, 3] and all(r["state"] == "up" for r in st["ranks"])
    by_name = {d["name"]: d for d in st["datasets"]}
    assert set(by_name) == {"rows", "files"}
    for d in by_name.values():
        assert sum(d["samples_per_rank"]) == d["samples"] and all(n > 0 for n in d["samples_per_rank"])
    assert all(r["memory_used"] > 0 for r in st["ranks"])
    assert len([s for s in store.segments() if not s.endswith(".lock")]) == 8
    for seed in range(3):
        spec, _ = random_spec(500, seed, count=40)
        for field in ("x", "y"):
            assert read_store(ddstage, store.dir, "rows", spec, field, "--verify") == \
                read_bytes(ddstage, datasets["rows"], spec, field)
        spec, _ = random_spec(300, seed, count=40)
        assert read_store(ddstage, store.dir, "files", spec) == read_bytes(ddstage, datasets["files"], spec)
    text = ddstage.ok("status", "--store", store.dir).stdout
    assert "rows: 500 samples" in text and "up" in text
    store.stop()
    assert store.segments() == []


@pytest.mark.release_pass
def test_single_rank_without_mpiexec(ddstage, serve, datasets):
    """Plain `ddstage serve` is a one-rank store."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    assert len(status(ddstage, store.dir)["ranks"]) == 1
    assert read_store(ddstage, store.dir, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
    store.stop()


@pytest.mark.release_pass
def test_profile_printed_at_exit(ddstage, serve, datasets, tmp_path):
    """DDSTAGE_PROFILE=1 prints the read profile on stderr at exit; a file name (with %p) gets it
    instead; off, nothing is printed and the output bytes are the same."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "rows")
    plain = ddstage.ok("read", "--store", store.dir, "--dataset", "rows", "--ids", "0-99", "--field", "x",
                       binary=True)
    assert plain.stderr == b""
    on = ddstage.ok("read", "--store", store.dir, "--dataset", "rows", "--ids", "0-99", "--field", "x",
                    binary=True, env={"DDSTAGE_PROFILE": "1"})
    assert on.stdout == plain.stdout
    text = on.stderr.decode()
    assert "ddstage profile (pid" in text and "rows, 0.3 MiB" in text and "paths: shm" in text
    assert "copy" in text and "other" in text
    proc = ddstage.ok("read", "--store", store.dir, "--dataset", "rows", "--ids", "0-9", "--field", "y",
                      binary=True, env={"DDSTAGE_PROFILE": str(tmp_path / "prof-%p.txt")})
    assert proc.stderr == b""
    written = list(tmp_path.glob("prof-*.txt"))
    assert len(written) == 1 and written[0].name != "prof-%p.txt"
    assert "10 rows" in written[0].read_text()
    store.stop()


def test_wrong_token_is_refused_and_logged(ddstage, serve, datasets, tmp_path):
    """A request with another token changes nothing; the server logs the refusal."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    forged = tmp_path / "forged"
    forged.mkdir()
    d = yaml.safe_load((store.dir / "store.yaml").read_text())
    d["token"] = "0" * 32
    (forged / "store.yaml").write_text(yaml.safe_dump(d))
    for cmd in (["stop"], ["status"], ["load", datasets["rows"], "--name", "r"]):
        assert_usage_error(ddstage.run(*cmd, "--store", forged), "refused")
    assert [x["name"] for x in status(ddstage, store.dir)["datasets"]] == ["f"]
    assert "refused a control request" in store.wait_output("refused a control request")


def test_store_dir_errors(ddstage, tmp_path):
    """No store, and a descriptor from a newer ddstage: clear errors, nothing started."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_usage_error(ddstage.run("status", "--store", empty), "no store")
    assert_usage_error(ddstage.run("read", "--store", empty, "--dataset", "x", "--ids", "0"), "no store")
    (empty / "store.yaml").write_text("format_version: 99\ntoken: x\ncontrol: 127.0.0.1:1\nranks: []\ndatasets: []\n")
    assert_runtime_error(ddstage.run("status", "--store", empty), "newer")


@pytest.mark.release_pass
def test_second_serve_is_refused(ddstage, serve):
    store = serve(ranks=0)
    proc = subprocess.run([ddstage.path, "serve", "--store", store.dir, "--listen", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **MPI_ENV})
    assert_usage_error(proc, "already running")
    store.stop()


def test_load_errors_leave_loaded_datasets_serving(ddstage, serve, datasets, tmp_path, gen):
    """Too large, a name that exists, a missing origin file: refused or rolled back, the
    loaded dataset keeps serving, no segment of the failed load remains."""
    store = serve(4)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    before = store.segments()
    assert_usage_error(ddstage.run("load", "--store", store.dir, datasets["rows"], "--mem-limit", "1K"),
                       "does not fit", "rank")
    assert_usage_error(ddstage.run("load", "--store", store.dir, datasets["files"], "--name", "f"),
                       "already loaded")
    gen.ok("files", tmp_path / "doomed", "--samples", "40")
    doomed = flatten(ddstage, tmp_path / "doomed.ddx", tmp_path / "doomed")
    victim = sorted((tmp_path / "doomed").rglob("*.bin"))[-1]
    victim.unlink()
    proc = ddstage.run("load", "--store", store.dir, doomed, "--name", "doomed")
    assert proc.returncode != 0 and victim.name in proc.stderr, proc.stderr
    assert store.segments() == before
    assert [x["name"] for x in status(ddstage, store.dir)["datasets"]] == ["f"]
    assert read_store(ddstage, store.dir, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f", "--replace")
    assert read_store(ddstage, store.dir, "f", "7") == read_bytes(ddstage, datasets["files"], "7")
    store.stop()


def test_bad_reads(ddstage, serve, datasets):
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "rows")
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "nope", "--ids", "0"), "nope", "rows")
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "0", "--field", "z"),
                       "no field 'z'")
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "500", "--field", "x"),
                       "out of range")
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "0"), "--field")
    store.stop()


def test_killed_rank_fails_reads_quickly_and_stop_cleans_up(ddstage, serve, datasets):
    """SIGKILL one rank: reads of its rows fail (naming a rank or the dead store) within
    read_timeout and a few times what the same read took before, instead of hanging; `stop`
    then removes every process, segment and the descriptor."""
    store = serve(4)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    st = status(ddstage, store.dir)
    owned = st["datasets"][0]["samples_per_rank"]
    first_of_rank2 = owned[0] + owned[1]
    pids = store.pids()
    read = ["read", "--store", store.dir, "--dataset", "f", "--ids", str(first_of_rank2)]
    env = {"DDSTAGE_READ_TIMEOUT": f"{READ_TIMEOUT_S}s"}
    _, read_s = timed(ddstage.ok, *read, binary=True, env=env)
    os.kill(pids[2], signal.SIGKILL)
    assert wait_dead([pids[2]])
    proc, took = timed(ddstage.run, *read, env=env)
    assert took < READ_TIMEOUT_S + STARTUPS * read_s, f"the read took {took:.1f} s, {read_s:.2f} s before the kill"
    assert proc.returncode == 1 or proc.returncode == 2, proc.stderr
    # MPI takes the other ranks down too; a read that lands while they remove their segments
    # (slow builds get there) finds a segment gone.
    assert any(w in proc.stderr for w in ("rank 2", "not running", "cannot open shared memory")), proc.stderr
    if "is gone" in proc.stderr:  # and says how its samples come back
        assert "ddstage load --store" in proc.stderr and "--repair" in proc.stderr, proc.stderr
    # Status names the dead rank while the others still run. When MPI has taken them down and
    # rank 0 removed its descriptor on the way out (slow builds get there first), there is no
    # store left to report on, which status says instead.
    proc = ddstage.run("status", "--store", store.dir, "--json")
    if proc.returncode == 2:
        assert "no store at" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 1, proc.stderr
        assert json.loads(proc.stdout)["ranks"][2]["state"] == "lost", proc.stdout
    ddstage.run("stop", "--store", store.dir)
    store.proc.wait(timeout=30)
    assert not (store.dir / "store.yaml").exists()
    assert store.segments() == []
    assert wait_dead(pids), "server ranks left behind"


def test_stale_descriptor_is_detected_and_replaced(ddstage, serve, datasets):
    """A store killed outright leaves store.yaml behind: clients say it is not running, and a new
    serve on the directory replaces it."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    old_pids = store.pids()
    store.kill()
    assert (store.dir / "store.yaml").exists()
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "f", "--ids", "0"), "not running")
    again = Store(ddstage, store.dir, 2)
    try:
        assert "stale" in again.wait_output("stale")
        # The old store.yaml is removed with its store, and the new one written once the new
        # ranks have started: wait for it (bounded) before asking the new store.
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (store.dir / "store.yaml").exists() or again.pids() == old_pids:
            assert time.monotonic() < deadline and again.proc.poll() is None, again.output()
            time.sleep(0.05)
        assert store.segments() == []  # the dead store's segments were removed
        assert status(ddstage, store.dir)["datasets"] == []
        again.stop()
    finally:
        again.kill()


def test_reflattened_index_is_refused(ddstage, serve, datasets, tmp_path):
    """The store holds a snapshot: after the index is re-flattened, clients must not address the
    old shards with the new index."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    (tmp_path / "tree" / "extra.bin").write_bytes(b"new sample")
    flatten(ddstage, datasets["files"], tmp_path / "tree", "--force")
    assert_runtime_error(ddstage.run("read", "--store", store.dir, "--dataset", "f", "--ids", "0"), "changed after")
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f", "--replace")
    assert read_store(ddstage, store.dir, "f", "300") == read_bytes(ddstage, datasets["files"], "300")
    store.stop()


def test_bench_store_structure(ddstage, serve, datasets, tmp_path):
    """bench store on a served store at a tiny size: every cell of the matrix and a floor per
    batch, bytes add up, percentiles ordered (never a speed); CSV has one line per cell; the
    plot is a PNG; bad input fails before measuring."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "rows")
    out = tmp_path / "bench.json"
    text = ddstage.ok("bench", "store", "--store", store.dir, "--dataset", "rows", "--field", "x",
                      "--transport", "shm", "--batch", "1,16", "--threads", "1,2", "--sharing", "own,shared",
                      "--samples", "64", "--json", out, "--csv", tmp_path / "bench.csv",
                      "--plot", tmp_path / "bench.png").stdout
    assert "memcpy" in text and "x_floor" in text
    report = json.loads(out.read_text())
    assert report["schema"] == "ddstage-bench/2" and report["bench"] == "store" and report["run"]["cores"]
    assert report["run"]["transports"] == "shm"
    cells = {tuple(c["dims"][k] for k in ("transport", "mode", "batch", "threads", "sharing"))
             for c in report["cells"]}
    expected = {("shm", "get_batch", b, t, s) for b in (1, 16) for t in (1, 2) for s in ("own", "shared")}
    assert cells == expected | {("memcpy", "floor", b, 1, "own") for b in (1, 16)}
    assert len(report["cells"]) == len(cells)
    for c in report["cells"]:
        assert c["rows"] == 64 and c["dims"]["row_bytes"] == 768 * 4
        assert c["bytes"] == c["rows"] * c["dims"]["row_bytes"]
        assert c["calls"] >= 64 // c["dims"]["batch"]
        assert 0 <= c["p50_us"] <= c["p99_us"] <= c["p999_us"] <= c["max_us"]
    lines = (tmp_path / "bench.csv").read_text().splitlines()
    assert lines[0].startswith("transport,mode,row_bytes,batch,threads,sharing,rows,bytes")
    assert len(lines) == 1 + len(report["cells"])
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = [("--batch", "0", "batch"), ("--threads", "0", "threads"), ("--sharing", "some", "sharing"),
           ("--transport", "mpi", "transport"), ("--plot", tmp_path / "p.pdf", ".png or .svg")]
    for flag, value, named in bad:
        assert_usage_error(ddstage.run("bench", "store", "--store", store.dir, "--dataset", "rows", "--field", "x",
                                       "--samples", "8", flag, value), named)
    assert not (tmp_path / "p.pdf").exists()
    store.stop()


def test_load_streams_and_progress(ddstage, serve, datasets):
    """--streams 1 and --streams 3 load the origin's bytes; with DDSTAGE_PROGRESS=always the
    load draws progress on stderr (what the store reported, then the end) and still prints its
    result; rank 0 logs its progress; --streams 0 is a usage error."""
    store = serve(2)
    for streams in ("1", "3"):
        for ds, fields in (("rows", ("x", "y")), ("files", (None,))):
            name = f"{ds}{streams}"
            proc = ddstage.ok("load", "--store", store.dir, datasets[ds], "--name", name, "--streams", streams,
                              "--verify", env={"DDSTAGE_PROGRESS": "always"})
            assert f"loaded '{name}'" in proc.stdout and "verified" in proc.stdout
            draws = [d for d in proc.stderr.replace("\r", "\n").splitlines() if d.startswith("load:")]
            assert len(draws) >= 2, proc.stderr  # at least one report from the store, and the end
            assert "(100%)" in draws[-1] and " in " in draws[-1], draws
            n = 500 if ds == "rows" else 300
            for field in fields:
                assert read_store(ddstage, store.dir, name, f"0-{n - 1}", field) == \
                    read_bytes(ddstage, datasets[ds], f"0-{n - 1}", field)
    assert "loading 'files3': 100%" in store.wait_output("loading 'files3': 100%")
    assert "load:" not in ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "quiet").stderr
    for bad in ("0", "65", "-1", "x"):
        assert_usage_error(ddstage.run("load", "--store", store.dir, datasets["files"], "--name", "z", "--streams", bad),
                           "--streams")
    assert "z" not in [d["name"] for d in status(ddstage, store.dir)["datasets"]]
    store.stop()


def test_bench_load_structure(ddstage, serve, datasets, tmp_path):
    """bench load: every step reported, bytes are the index's, the ratios are the bandwidths'
    (never a speed), and the temporary dataset is gone afterwards."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "kept")
    for ds, extra in (("rows", ["--streams", "2"]), ("files", ["--warm"])):
        out = tmp_path / f"bench-{ds}.json"
        text = ddstage.ok("bench", "load", "--store", store.dir, datasets[ds], "--json", out, *extra).stdout
        assert "sequential read (cat)" in text and "sequential copy (cat > /dev/shm)" in text
        assert "ratio: load at" in text
        report = json.loads(out.read_text())
        info = json.loads(ddstage.ok("info", datasets[ds], "--json").stdout)
        assert report["schema"] == "ddstage-bench/2" and report["bench"] == "load" and report["ranks"] == 2
        assert report["bytes"] == info["total_bytes"] and report["samples"] == info["samples"]
        assert report["cat_bytes"] >= report["bytes"] and report["warm"] == ("--warm" in extra)
        assert report["streams"] == (2 if ds == "rows" else 4)
        assert report["ratio_vs_cat"] == pytest.approx(report["load_mb_per_s"] / report["cat_mb_per_s"], rel=1e-3)
        assert report["shm_copy_mb_per_s"] == pytest.approx(report["cat_bytes"] / report["shm_copy_seconds"] / 1e6,
                                                            rel=1e-3)
        assert report["ratio_vs_shm_copy"] == pytest.approx(report["load_mb_per_s"] / report["shm_copy_mb_per_s"],
                                                            rel=1e-3)
        assert report["shm_copy_skipped"] is None
    assert [d["name"] for d in status(ddstage, store.dir)["datasets"]] == ["kept"]
    assert_usage_error(ddstage.run("bench", "load", "--store", store.dir, datasets["rows"], "--name", "kept"),
                       "already loaded")
    assert [d["name"] for d in status(ddstage, store.dir)["datasets"]] == ["kept"]  # a failed bench unloads nothing
    assert_usage_error(ddstage.run("bench", "load", "--store", store.dir, datasets["rows"], "--streams", "0"),
                       "--streams")
    store.stop()


def test_bench_load_skips_a_copy_that_does_not_fit(ddstage, serve, datasets, tmp_path):
    """bench load where /dev/shm cannot hold the files (the bench's own 1 MiB tmpfs, in a mount
    namespace; the store's ranks keep the real one): the copy baseline is skipped and says why,
    its figures are null, and the load is still measured and unloaded."""
    mount = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    small_shm = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount + ' && exec "$0" "$@"']
    if subprocess.run([*small_shm[:-1], mount]).returncode != 0:
        pytest.skip("cannot mount a tmpfs in a mount namespace here (needs root and CAP_SYS_ADMIN)")
    store = serve(1)
    out = tmp_path / "bench.json"
    text = ddstage.ok("bench", "load", "--store", store.dir, datasets["rows"], "--json", out,
                      prefix=small_shm).stdout
    assert "do not fit in /dev/shm" in text and "the copy not run" in text
    report = json.loads(out.read_text())
    assert report["shm_copy_seconds"] is None and report["shm_copy_mb_per_s"] is None
    assert report["ratio_vs_shm_copy"] is None and "do not fit in /dev/shm" in report["shm_copy_skipped"]
    assert report["bytes"] == json.loads(ddstage.ok("info", datasets["rows"], "--json").stdout)["total_bytes"]
    assert report["load_mb_per_s"] > 0 and report["cat_mb_per_s"] > 0
    assert status(ddstage, store.dir)["datasets"] == []
    store.stop()


# libfabric on loopback only: tcp;ofi_rxm on lo (its server thread sleeps in fi_cq_sread, so
# oversubscribed ranks do not spin). Servers and readers use the same settings.
FABRIC_ENV = {"DDSTAGE_FABRIC_PROVIDER": "tcp", "DDSTAGE_FABRIC_DOMAIN": "lo", "FI_TCP_IFACE": "lo"}
READ_FABRIC = {**FABRIC_ENV, "DDSTAGE_TRANSPORT": "fabric"}


def fill_up(directory):
    """Writes a file into directory until its file system is full (ENOSPC)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return directory / "filler"


def test_descriptor_that_cannot_be_written_fails_the_load_and_keeps_ranks_in_step(ddstage, serve, datasets,
                                                                                  tmp_path):
    """publish() failing on rank 0 alone (store.yaml's disk is full) fails that load with a clear
    run-time error, and every rank stays in step: status, the next load and stop still answer.
    Before, rank 0 skipped the collective that follows each command and the next one hung."""
    small = tmp_path / "small"
    small.mkdir(mode=0o700)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", small]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        store = serve(2, name="small/store")
        filler = fill_up(small)
        assert_runtime_error(ddstage.run("load", "--store", store.dir, datasets["files"], "--name", "f"),
                             "store.yaml", "space")
        filler.unlink()
        # The ranks hold 'f' but store.yaml does not list it until its next write succeeds.
        assert status(ddstage, store.dir)["datasets"] == []
        ddstage.ok("load", "--store", store.dir, datasets["rows"], "--name", "r")
        assert sorted(d["name"] for d in status(ddstage, store.dir)["datasets"]) == ["f", "r"]
        assert read_store(ddstage, store.dir, "r", "0-9", "y") == read_bytes(ddstage, datasets["rows"], "0-9",
                                                                             field="y")
        assert read_store(ddstage, store.dir, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
        store.stop()
    finally:
        subprocess.run(["umount", "-l", small])
