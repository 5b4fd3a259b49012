"""The store's life cycle around `serve` (issue 12): `wait` tells a live store from a dead
one's leftover descriptor, `clean` removes what SIGKILLed ranks leave and nothing else, `stop`
is honest and signals only processes a rank lock proves to be the store's, and every command
finds its store from DDSTAGE_STORE.

The whole module runs in a private mount namespace with its own tmpfs on /dev/shm: `clean`
acts on every dead store of the node, and must see only the stores these tests start (never
another job's on this machine), and "nothing left" is then exact."""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import assert_runtime_error, assert_usage_error, flatten, read_bytes
from test_store import Store, datasets, read_store, serve, status, wait_dead  # noqa: F401 (fixtures)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import LAUNCHER_TEARDOWN_S, heartbeat_interval, wait_until  # noqa: E402
from local_mpi import MPI_ENV, VADER_DIR, pid_alive  # noqa: E402

SHM = Path("/dev/shm")
CLONE_NEWNS = 0x00020000
# Where waiting matters: a store that does not answer is given up on in seconds.
CONTROL_TIMEOUT_S = 3
FAST = {"DDSTAGE_CONTROL_TIMEOUT": f"{CONTROL_TIMEOUT_S}s"}


@pytest.fixture(scope="module", autouse=True)
def private_shm():
    """This process (and so every ddstage, mpiexec and rank it starts) gets a /dev/shm of its
    own: a mount namespace, private propagation, a fresh tmpfs."""
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() != 0 or shutil.which("mount") is None or libc.unshare(CLONE_NEWNS) != 0:
        pytest.skip("needs root and mount namespaces for a private /dev/shm")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    # OpenMPI's directory (local_mpi.VADER_DIR) moves along: made empty on the host's /dev/shm
    # at import, it would be left there, and be missing in the private one.
    VADER_DIR.rmdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=1777", "tmpfs", str(SHM)], check=True)
    VADER_DIR.mkdir()
    yield


def store_files(store_id):
    """Every file in /dev/shm named after that store: segments and rank locks."""
    return sorted(p.name for p in SHM.glob(f"ddstage-{store_id}-*"))


def kill_job(store):
    """SIGKILL mpiexec and every rank at once: what a node's OOM killer or a scancel -9 does."""
    store.kill()


def rewrite(path, **changes):
    """store.yaml with top-level keys and rank 0's keys (prefixed rank0_) changed, written as
    the server writes it (mode 0600, atomically)."""
    d = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if key.startswith("rank0_"):
            d["ranks"][0][key[len("rank0_"):]] = value
        else:
            d[key] = value
    tmp = path.with_name(".store.yaml.test")
    tmp.write_text(yaml.safe_dump(d))
    tmp.chmod(0o600)
    os.replace(tmp, path)


@pytest.fixture
def imposter():
    """A live process, not a store's rank, whose command line says "ddstage"."""
    proc = subprocess.Popen(["bash", "-c", "exec -a ddstage-imposter sleep 120"])
    wait_until(lambda: "ddstage" in Path(f"/proc/{proc.pid}/cmdline").read_text(), 30, "bash never ran sleep")
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def dead_leftover(ddstage, serve, datasets):
    """A store killed outright after a load: its store.yaml, segments and rank locks remain."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    kill_job(store)
    assert (store.dir / "store.yaml").exists()
    assert len(store_files(store.descriptor["id"])) == 4  # 2 segments, 2 locks
    return store


# ---- wait -----------------------------------------------------------------------------------

@pytest.mark.busy
def test_readme_sequence_serve_wait_load_read_stop(ddstage, datasets, tmp_path):
    """`mpiexec -n 2 ddstage serve --store D &` then `ddstage wait` and load at once: the
    README's sequence, with no polling of the user's own; stop leaves no directory behind."""
    d = tmp_path / "store"
    log = open(tmp_path / "serve.log", "w+")
    job = subprocess.Popen(["mpiexec", "-n", "2", ddstage.path, "serve", "--store", d, "--listen", "127.0.0.1:0"],
                           stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **MPI_ENV},
                           start_new_session=True)
    try:
        out = ddstage.ok("wait", "--store", d, "--timeout", "60s", "--pid", job.pid).stdout
        assert out == f"store at {d} ready: 2 ranks on 1 host\n"
        ddstage.ok("load", "--store", d, datasets["files"], "--name", "f")
        assert read_store(ddstage, d, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
        store_id = yaml.safe_load((d / "store.yaml").read_text())["id"]
        proc = ddstage.ok("stop", "--store", d)
        assert "stopped ranks 0-1 of the store at" in proc.stdout
        assert job.wait(timeout=30) == 0
        assert not d.exists(), "stop leaves the empty store directory behind"
        assert store_files(store_id) == []
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)


@pytest.mark.busy
def test_wait_is_not_fooled_by_a_dead_stores_descriptor(ddstage, serve, datasets):
    """A dead store's store.yaml: wait keeps polling and gives up with exit 1 naming the control
    address (at its --timeout, or once the request then in flight has had control_timeout); a
    wait running when a new serve replaces the file returns 0."""
    store = dead_leftover(ddstage, serve, datasets)
    wait_s = 2
    t0 = time.monotonic()
    proc = ddstage.run("wait", "--store", store.dir, "--timeout", f"{wait_s}s", env=FAST)
    assert_runtime_error(proc, f"no live store at {store.dir} after {wait_s}s", store.descriptor["control"],
                         "does not answer", "ddstage stop --store")
    took = time.monotonic() - t0
    assert took < store.within(wait_s + CONTROL_TIMEOUT_S), f"wait gave up after {took:.1f} s"
    waiting_s = 60
    waiting = subprocess.Popen([ddstage.path, "wait", "--store", store.dir, "--timeout", f"{waiting_s}s"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Polling the dead store's descriptor: asleep between its looks, not ended.
        wait_until(lambda: waiting.poll() is not None or
                   Path(f"/proc/{waiting.pid}/wchan").read_text() == "hrtimer_nanosleep",
                   waiting_s, "wait never waited")
        assert waiting.poll() is None, waiting.communicate()
        again = Store(ddstage, store.dir, 2)
        try:
            out, err = waiting.communicate(timeout=60)
            assert waiting.returncode == 0, err
            assert "ready: 2 ranks on 1 host" in out
            again.stop()
        finally:
            again.kill()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


@pytest.mark.busy
def test_wait_for_a_serve_that_fails_fails_at_once(ddstage, tmp_path):
    """--pid of a launcher whose serve fails (a bad --mem-limit): exit 1 as soon as it exits, not
    at the timeout: wait returns within moments of the launcher's end, however long that took."""
    d = tmp_path / "store"
    wait_s = 120
    job = subprocess.Popen(["mpiexec", "-n", "2", ddstage.path, "serve", "--store", d, "--mem-limit", "lots"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **MPI_ENV})
    t0 = time.monotonic()
    proc = ddstage.run("wait", "--store", d, "--timeout", f"{wait_s}s", "--pid", job.pid)
    took = time.monotonic() - t0
    job.wait(timeout=30)
    assert_runtime_error(proc, f"serve (pid {job.pid}) exited before the store at {d} was ready")
    assert took < wait_s / 2, f"wait took {took:.1f} s of its {wait_s} s timeout"


def test_wait_errors(ddstage, tmp_path):
    assert_usage_error(ddstage.run("wait", "--store", tmp_path, "--timeout", "soon"), "bad --timeout 'soon'")
    proc = ddstage.run("wait", "--store", tmp_path / "none", "--timeout", "300ms")
    assert_runtime_error(proc, "no store at", "after 300ms", "there is no store.yaml")


# ---- clean ----------------------------------------------------------------------------------

@pytest.mark.parametrize("loaded", [False, True], ids=["idle", "after-load"])
@pytest.mark.busy
def test_clean_removes_exactly_a_killed_stores_files(ddstage, serve, datasets, loaded):
    """Every rank and mpiexec SIGKILLed: clean removes that store's segments and locks, nothing of
    a live store beside it (whose reads still work); --dry-run removes nothing."""
    live = serve(2, name="live")
    ddstage.ok("load", "--store", live.dir, datasets["files"], "--name", "f")
    dead = serve(2, name="dead")
    if loaded:
        ddstage.ok("load", "--store", dead.dir, datasets["rows"], "--name", "rows")
    kill_job(dead)
    dead_id, live_id = dead.descriptor["id"], live.descriptor["id"]
    left = store_files(dead_id)
    assert len(left) == (4 if loaded else 2)
    live_files = store_files(live_id)

    dry = ddstage.ok("clean", "--dry-run")
    assert store_files(dead_id) == left and store_files(live_id) == live_files
    assert all(f"would remove segment /dev/shm/{n}" in dry.stdout for n in left if not n.endswith(".lock"))
    assert f"store {live_id} rank 1: live (pid {live.pids()[1]}), kept" in dry.stdout

    proc = ddstage.ok("clean")
    assert store_files(dead_id) == []
    assert store_files(live_id) == live_files
    assert f"removed lock /dev/shm/ddstage-{dead_id}-r0.lock" in proc.stdout
    assert proc.stdout.rstrip().endswith("of 1 dead store; 1 live store kept"), proc.stdout
    assert read_store(ddstage, live.dir, "f", "0-299") == read_bytes(ddstage, datasets["files"], "0-299")
    live.stop()


def test_clean_with_nothing_to_do_exits_0(ddstage, tmp_path):
    proc = ddstage.ok("clean", "--store", tmp_path / "no-such-store")
    assert proc.stdout.splitlines() == [
        f"no store.yaml in {tmp_path / 'no-such-store'}: cleaning every dead store on this node", "nothing to clean"]
    assert proc.stderr == ""


def test_clean_store_removes_only_that_stores_files(ddstage, serve, datasets):
    """--store DIR: only DIR's dead store goes (another dead store, maybe another user's, is
    left to its owner); `clean` alone, as in an epilogue, sweeps every dead store."""
    stores = [serve(2, name=name) for name in ("mine", "other")]
    for store in stores:
        ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
        kill_job(store)
    mine, other = (store.descriptor["id"] for store in stores)
    others_files = store_files(other)
    assert len(store_files(mine)) == len(others_files) == 4  # 2 segments, 2 locks
    proc = ddstage.ok("clean", "--store", stores[0].dir)
    assert store_files(mine) == [] and not stores[0].dir.exists()
    assert store_files(other) == others_files
    assert "of 1 dead store" in proc.stdout, proc.stdout
    ddstage.ok("clean")
    assert store_files(other) == []


@pytest.mark.busy
def test_clean_store_removes_the_descriptor_only_of_a_store_gone_from_this_host(ddstage, serve, datasets):
    """--store DIR: store.yaml and the then empty DIR go when rank 0 ran here and is gone; a
    descriptor naming another host is kept."""
    store = dead_leftover(ddstage, serve, datasets)
    elsewhere = store.dir.parent / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shutil.copy(store.dir / "store.yaml", elsewhere / "store.yaml")
    rewrite(elsewhere / "store.yaml", rank0_host="node-elsewhere")
    proc = ddstage.ok("clean", "--store", elsewhere)
    assert "its rank 0 ran on node-elsewhere" in proc.stdout
    assert (elsewhere / "store.yaml").exists()
    proc = ddstage.ok("clean", env={"DDSTAGE_STORE": str(store.dir)})
    assert f"removed {store.dir}/store.yaml" in proc.stdout
    assert not store.dir.exists()
    assert store_files(store.descriptor["id"]) == []


# ---- stop -----------------------------------------------------------------------------------

@pytest.mark.busy
def test_stop_with_a_stopped_rank_0_ends_the_store(ddstage, serve, datasets):
    """Rank 0 SIGSTOPped: stop gives up on it after control_timeout, ends the ranks their locks
    prove to be this store's, and leaves no process, segment, lock, descriptor or directory."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    pids = store.pids()
    os.kill(pids[0], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        proc = ddstage.run("stop", "--store", store.dir, env=FAST)
        took = time.monotonic() - t0
        assert took < store.within(CONTROL_TIMEOUT_S), f"stop took {took:.1f} s:\n{proc.stderr}"
    finally:
        if pid_alive(pids[0]):
            os.kill(pids[0], signal.SIGCONT)
    assert proc.returncode == 0, proc.stderr
    assert "stopped ranks 0-1 of the store at" in proc.stdout and "by signal" in proc.stdout
    assert f"ending rank 0 (pid {pids[0]})" in proc.stderr
    assert wait_dead(pids)
    store.proc.wait(timeout=30)
    assert store_files(store.descriptor["id"]) == []
    assert not store.dir.exists()


@pytest.mark.busy
def test_a_load_outlasting_control_timeout_from_a_job_script_succeeds(ddstage, gen, serve, tmp_path):
    """Rank 1 paused once it has begun loading its shard: rank 0, done with its own, waits for
    it for longer than control_timeout. The load, run as a job script runs it (stderr a pipe: no
    progress line), lives on the store's keepalives (every 5 s) and succeeds once rank 1 runs
    again."""
    gen.ok("files", tmp_path / "big", "--samples", "300", "--min-bytes", "1000000", "--max-bytes", "1000000")
    big = flatten(ddstage, tmp_path / "big.ddx", tmp_path / "big")
    store = serve(2)
    pids = store.pids()
    load = subprocess.Popen([ddstage.path, "load", "--store", store.dir, big, "--name", "big", "--streams", "1",
                             "--verify"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DDSTAGE_CONTROL_TIMEOUT": "7s"})
    t0 = time.monotonic()
    try:
        # Its segment exists from the start of its load: paused then, rank 1 is mid-shard.
        while not list(SHM.glob(f"ddstage-{store.descriptor['id']}-big-g*-r1")) and load.poll() is None:
            pass
        os.kill(pids[1], signal.SIGSTOP)
        assert load.poll() is None, "the load ended before rank 1 could be paused"
        time.sleep(16)  # two keepalives past control_timeout
    finally:
        os.kill(pids[1], signal.SIGCONT)
    out, err = load.communicate(timeout=60)
    assert load.returncode == 0, err
    assert time.monotonic() - t0 > 16
    assert out.startswith("loaded 'big': 300 samples, 286.1 MiB"), out
    assert read_store(ddstage, store.dir, "big", "299") == read_bytes(ddstage, big, "299")
    store.stop()


def last_heard(ddstage, store, rank):
    """Seconds since rank 0 last heard from `rank`, as `status --json` says (exit 1: lost)."""
    return json.loads(ddstage.run("status", "--store", store.dir, "--json").stdout)["ranks"][rank]["last_heard"]


@pytest.mark.busy
def test_status_shows_a_silent_rank_lost(ddstage, serve):
    """Rank 0 answers, but has not heard from rank 1 for longer than the peer_timeout status is
    given: status marks it lost, says so, and exits 1."""
    status_peer_timeout_s = 1
    store = serve(2, env={"DDSTAGE_PEER_TIMEOUT": "20s"})
    pids = store.pids()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        wait_until(lambda: last_heard(ddstage, store, 1) > status_peer_timeout_s,
                   store.within(status_peer_timeout_s), "rank 1 still heard from")
        proc = ddstage.run("status", "--store", store.dir, "--json",
                           env={"DDSTAGE_PEER_TIMEOUT": f"{status_peer_timeout_s}s"})
    finally:
        os.kill(pids[1], signal.SIGCONT)
    assert_runtime_error(proc, "is not healthy", "rank 0 has not heard from rank 1")
    ranks = json.loads(proc.stdout)["ranks"]
    assert [r["state"] for r in ranks] == ["up", "lost"] and ranks[1]["last_heard"] > status_peer_timeout_s, ranks
    store.stop()


def open_files_limit(pid):
    """(soft, hard) of a process's RLIMIT_NOFILE, from /proc."""
    line = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_rank_0_out_of_descriptors_fails_the_command_and_loses_no_rank(ddstage, serve, datasets):
    """serve raises every rank's soft open-file limit to the hard one. A rank 0 that still runs
    out (its soft limit cut with prlimit to what it holds, plus one for the client's request)
    fails a load as its own error, and marks no rank lost: its own resource is no peer's death
    (before, each rank it could not open a socket to was marked lost). With the limit back, the
    same load succeeds beside the dataset loaded before."""
    store = serve(3)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    rank0 = store.pids()[0]
    soft, hard = open_files_limit(rank0)
    assert soft == hard
    held = len(os.listdir(f"/proc/{rank0}/fd"))
    subprocess.run(["prlimit", f"--pid={rank0}", f"--nofile={held + 1}:{hard}"], check=True)
    try:
        proc = ddstage.run("load", "--store", store.dir, datasets["files"], "--name", "g")
    finally:
        subprocess.run(["prlimit", f"--pid={rank0}", f"--nofile={hard}:{hard}"], check=True)
    assert_runtime_error(proc, "rank 0 on ", "Too many open files")
    assert [r["state"] for r in status(ddstage, store.dir)["ranks"]] == ["up"] * 3
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "g")
    assert read_store(ddstage, store.dir, "g", "0-299") == read_store(ddstage, store.dir, "f", "0-299")
    store.stop()


@pytest.mark.busy
def test_stop_reports_a_rank_it_cannot_reach(ddstage, serve, datasets):
    """Rank 1 paused: rank 0 answers stop without it, and stop names it, says what to do, and
    exits 1; once it runs again it ends itself (or mpiexec, seeing rank 0 end so, ends it), and
    clean finds nothing of the store left."""
    peer_timeout_s = 10
    store = serve(2, env={"DDSTAGE_PEER_TIMEOUT": f"{peer_timeout_s}s"})
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    pids = store.pids()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        # Past three heartbeat intervals, when stop leaves a rank out; short of peer_timeout.
        patience = 3 * heartbeat_interval(peer_timeout_s)
        wait_until(lambda: last_heard(ddstage, store, 1) > patience, store.within(patience), "rank 1 still heard from")
        proc = ddstage.run("stop", "--store", store.dir, env=FAST)
    finally:
        os.kill(pids[1], signal.SIGCONT)
    assert_runtime_error(proc, "rank 1 of the store at", "could not be stopped from here")
    host = store.descriptor["ranks"][1]["host"]
    assert f"rank 1 on {host}: not reachable (last heard" in proc.stdout
    assert f"if it was killed, run `ddstage clean` on {host}" in proc.stdout
    assert "stopped rank 0 of the store at" in proc.stdout
    assert not (store.dir / "store.yaml").exists()
    assert wait_dead(pids, timeout=store.within(LAUNCHER_TEARDOWN_S))
    store.proc.wait(timeout=30)
    ddstage.ok("clean")
    assert store_files(store.descriptor["id"]) == []


@pytest.mark.busy
def test_stale_descriptor_naming_a_live_imposter_is_never_signalled(ddstage, serve, datasets, imposter):
    """store.yaml of a dead store whose rank-0 pid now belongs to an unrelated process with
    "ddstage" in its command line: neither stop nor a new serve signals it."""
    store = dead_leftover(ddstage, serve, datasets)
    rewrite(store.dir / "store.yaml", rank0_pid=imposter.pid)
    proc = ddstage.run("stop", "--store", store.dir, env=FAST)
    assert proc.returncode == 0, proc.stderr
    assert "ending rank" not in proc.stderr
    assert not (store.dir / "store.yaml").exists()
    assert store_files(store.descriptor["id"]) == []
    assert imposter.poll() is None and pid_alive(imposter.pid)

    second = dead_leftover(ddstage, serve, datasets)
    rewrite(second.dir / "store.yaml", rank0_pid=imposter.pid)
    again = Store(ddstage, second.dir, 2)
    try:
        ddstage.ok("wait", "--store", second.dir, "--timeout", "60s")
        assert "stale" in again.output()
        assert store_files(second.descriptor["id"]) == []
        again.stop()
    finally:
        again.kill()
    assert imposter.poll() is None and pid_alive(imposter.pid)


@pytest.mark.busy
def test_stop_never_removes_the_descriptor_of_a_rank_0_on_another_host(ddstage, serve, datasets):
    store = dead_leftover(ddstage, serve, datasets)
    rewrite(store.dir / "store.yaml", rank0_host="node-elsewhere")
    proc = ddstage.run("stop", "--store", store.dir, env=FAST)
    assert_runtime_error(proc, "rank 0 on node-elsewhere does not answer", store.descriptor["control"],
                         f"ddstage stop --store {store.dir}` on node-elsewhere", "ddstage clean --store")
    assert (store.dir / "store.yaml").exists()
    ddstage.ok("clean")  # this host's leftovers of it


# ---- DDSTAGE_STORE --------------------------------------------------------------------------

def test_store_comes_from_the_environment(ddstage, serve, datasets):
    store = serve(2)
    env = {"DDSTAGE_STORE": str(store.dir)}
    ddstage.ok("wait", "--timeout", "30s", env=env)
    ddstage.ok("load", datasets["files"], "--name", "f", env=env)
    assert "f: 300 samples" in ddstage.ok("status", env=env).stdout
    assert ddstage.ok("read", "--dataset", "f", "--ids", "0-9", binary=True, env=env).stdout == \
        read_bytes(ddstage, datasets["files"], "0-9")
    # A DATASET.ddx given names the origin: the environment's store does not take over.
    assert ddstage.ok("read", datasets["files"], "--ids", "3", binary=True, env=env).stdout == \
        read_bytes(ddstage, datasets["files"], "3")
    assert "stopped ranks 0-1" in ddstage.ok("stop", env=env).stdout
    assert store.proc.wait(timeout=30) == 0


@pytest.mark.parametrize("cmd", [["serve"], ["wait"], ["load", "x.ddx"], ["status"], ["stop"],
                                 ["read", "--dataset", "f", "--ids", "0"]])
def test_no_store_anywhere_is_a_usage_error(ddstage, cmd):
    assert_usage_error(ddstage.run(*cmd), "no store: pass --store DIR or set DDSTAGE_STORE")


def test_clean_keeps_segments_without_a_lock_file_unless_forced(ddstage):
    """Only a ddstage older than rank locks (or something else) leaves a segment with no lock:
    nothing proves its rank gone, so clean reports it and keeps it; --force removes it."""
    segment = SHM / f"ddstage-{os.urandom(6).hex()}-train-g1-r0"
    segment.write_bytes(b"x" * 4096)
    try:
        out = ddstage.ok("clean").stdout
        assert f"{segment.name[8:20]} rank 0: segments without a lock file" in out
        assert "--force" in out
        assert segment.exists()
        out = ddstage.ok("clean", "--force", "--dry-run").stdout
        assert f"would remove segment {segment}" in out
        assert segment.exists()
        ddstage.ok("clean", "--force")
        assert not segment.exists()
    finally:
        segment.unlink(missing_ok=True)
