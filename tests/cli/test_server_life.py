"""A server rank's whole life under real mpiexec jobs (2-3 ranks on 2 cores): every way out a
rank can see (a signal, a lost peer, a stop) frees its memory, whatever its main thread is
blocked in; what a SIGKILL leaves is only the killed rank's: its peers sweep it on their way
out, and `ddstage clean` what the last of them leaves when mpiexec's SIGKILL cuts it short.
Control replies (stop, status, heartbeat) are checked at the protocol level, so these
tests do not depend on how the CLI prints them.

Every deadline is a configured wait (peer_timeout, OpenMPI's kill sequence) plus a multiple of the
job's own start-up (deadlines.py): the tests hold with every core busy (pytest -m busy)."""
import fcntl
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import assert_runtime_error, assert_usage_error, flatten
from test_store import fill_up, serve, wait_dead  # noqa: F401  (fixture: a served store)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import (LAUNCHER_TEARDOWN_S, STARTUPS, heartbeat_interval, noticed_within,  # noqa: E402
                       wait_until)
from local_mpi import MPI_ENV, pid_alive  # noqa: E402

PEER_TIMEOUT_S = 3
PEER_TIMEOUT = {"DDSTAGE_PEER_TIMEOUT": f"{PEER_TIMEOUT_S}s"}


# ---- the control protocol, spoken directly ---------------------------------------------------

def control(store, request, timeout=30, rank=0):
    """One control request (protocol v2: magic, version, token, length, YAML body) to a rank's
    control socket (rank 0's is the store's); the reply."""
    d = yaml.safe_load((store.dir / "store.yaml").read_text())
    host, port = (d["ranks"][rank]["control"] if rank else d["control"]).rsplit(":", 1)
    body = yaml.safe_dump(request).encode()
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        s.sendall(b"DDSC" + struct.pack("<I", 2) + d["token"].encode() + struct.pack("<I", len(body)) + body)
        head = recv_exact(s, 44)
        assert head[:4] == b"DDSC", head
        return yaml.safe_load(recv_exact(s, struct.unpack("<I", head[40:44])[0]))


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the store closed the connection"
        out += chunk
    return out


# ---- what a store leaves ---------------------------------------------------------------------

def store_files(store):
    """This store's names in /dev/shm: segments and rank locks."""
    return sorted(p.name for p in Path("/dev/shm").glob(store.prefix + "-*"))


def fabric_queues(pids):
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.split(":")[0] in {str(x) for x in pids})


def wait_gone(store, pids, timeout):
    """Waits (bounded) until mpiexec and every rank ended; the seconds it took."""
    t0 = time.monotonic()
    try:
        store.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    assert wait_dead(pids, timeout=max(0.1, timeout - (time.monotonic() - t0))), \
        f"ranks still running after {timeout} s:\n{store.output()}"
    assert store.proc.poll() is not None, "mpiexec still running:\n" + store.output()
    return time.monotonic() - t0


def lock_pid(path):
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def lock_held(path):
    """Whether some process holds that rank lock now: ours is refused while it does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def rank_of_file(store, name):
    return int(re.fullmatch(re.escape(store.prefix) + r"-.*r(\d+)(\.lock|\.tiers)?", name).group(1))


def assert_nothing_left(ddstage, store, pids, launcher_may_kill=()):
    """No segment, lock, libfabric queue or store.yaml of the store is left.

    launcher_may_kill: ranks that mpiexec had to end. OpenMPI 4.1's kill sequence (SIGCONT,
    SIGTERM, SIGKILL) moves on to the next signal as soon as a child's exit cuts its wait short,
    so another rank's exit, moments after the SIGTERM, can SIGKILL such a rank before its way
    out is done. That is no exit a rank can see; what it leaves the design has `clean` find by
    name and owner: exactly that rank's files, its lock (which its way out removes last) among
    them and held by no one, and store.yaml when it was rank 0. `clean --dry-run` must name
    them all as a dead rank's; the test then removes them (clean itself would also remove other
    stores' leftovers on this machine, which are not the test's)."""
    left = store_files(store)
    if left:
        out = store.output()
        cut_short = sorted({rank_of_file(store, name) for name in left})
        assert set(cut_short) <= set(launcher_may_kill), f"ranks {cut_short} left {left}:\n{out}"
        for rank in cut_short:
            lock = f"{store.prefix}-r{rank}.lock"
            assert lock in left, f"rank {rank} removed its lock, yet left {left} behind:\n{out}"
            assert not lock_held(Path("/dev/shm") / lock), f"rank {rank}'s lock is held: {left}"
        plan = ddstage.ok("clean", "--dry-run", "--store", store.dir).stdout
        store_id = store.prefix[len("ddstage-"):]
        found = [re.fullmatch(r"would remove .+? (/\S+) \(.*; store (\w+) rank (\d+)\)", line)
                 for line in plan.splitlines()]
        ours = [Path(m.group(1)) for m in found if m and m.group(2) == store_id]
        assert sorted(p.name for p in ours if p.name.startswith(store.prefix)) == left, plan
        if (store.dir / "store.yaml").exists():
            assert f"would remove {store.dir}/store.yaml" in plan, plan
            ours.append(store.dir / "store.yaml")
        for path in ours:
            path.unlink()
    assert store_files(store) == [], store.output()
    assert fabric_queues(pids) == []
    assert not (store.dir / "store.yaml").exists()


def assert_not_misjudged(store, live):
    """The ranks in `live` ran all along: a rank declaring one of them lost (its heartbeats or
    answers late on a busy machine) is the product misjudging slow as dead."""
    out = store.output()
    descriptor = store.dir / "store.yaml"
    ranks = yaml.safe_load(descriptor.read_text())["ranks"] if descriptor.exists() else []
    wrongly = [r for r in live if r > 0 and r < len(ranks) and ranks[r].get("lost")]
    assert not wrongly, f"rank 0 declared live rank(s) {wrongly} lost under load: product misjudged slow as dead\n{out}"
    if 0 in live:
        assert "lost rank 0 on" not in out, \
            f"a rank declared live rank 0 lost under load: product misjudged slow as dead\n{out}"


@pytest.fixture
def big(ddstage, gen, tmp_path):
    """~256 MB of rows: a verified load with one stream takes seconds on this machine."""
    gen.ok("npy", tmp_path / "big.npy", "--samples", "4096", "--shape", "16384", "--dtype", "float32")
    return flatten(ddstage, tmp_path / "big.ddx", tmp_path / "big.npy")


@pytest.fixture
def small(ddstage, gen, tmp_path):
    gen.ok("files", tmp_path / "tree", "--samples", "200", "--min-bytes", "1", "--max-bytes", "5000")
    return flatten(ddstage, tmp_path / "small.ddx", tmp_path / "tree")


# ---- signals ---------------------------------------------------------------------------------

def descriptor_ranks(store):
    return yaml.safe_load((store.dir / "store.yaml").read_text())["ranks"]


def wait_marked_lost(store, rank, timeout):
    """Waits (bounded) until store.yaml marks the rank lost."""
    wait_until(lambda: descriptor_ranks(store)[rank].get("lost"), timeout,
               lambda: f"rank {rank} never marked lost:\n{store.output()}")


def rank_files(store, rank):
    return [f for f in store_files(store) if f.endswith((f"-r{rank}", f"-r{rank}.lock"))]


@pytest.mark.busy
def test_every_rank_holds_a_lock_and_sigterm_to_an_idle_rank_frees_it(ddstage, serve, small):
    """SIGTERM to rank 1 of a serving store: it frees what it holds and ends; past start-up no
    rank's end is another's (MPI is finalised), so the others serve on, rank 0 marks it lost,
    and stop ends them with nothing left."""
    store = serve(3, env=PEER_TIMEOUT)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    locks = [f for f in store_files(store) if f.endswith(".lock")]
    assert locks == [f"{store.prefix}-r{r}.lock" for r in range(3)]
    assert len(store_files(store)) == 6  # a segment per rank
    os.kill(pids[1], signal.SIGTERM)
    assert wait_dead([pids[1]], timeout=store.within()), store.output()
    assert "freeing this rank's memory" in store.wait_output("freeing this rank's memory")
    assert rank_files(store, 1) == []
    wait_marked_lost(store, 1, store.within(noticed_within(PEER_TIMEOUT_S)))
    assert store.proc.poll() is None and pid_alive(pids[0]) and pid_alive(pids[2]), store.output()
    assert_not_misjudged(store, live=[0, 2])
    proc = ddstage.ok("stop", "--store", store.dir)
    assert "stopped ranks 0,2" in proc.stdout, proc.stdout
    wait_gone(store, pids, store.within())
    assert_nothing_left(ddstage, store, pids)


@pytest.mark.busy
def test_sigterm_during_a_load_frees_the_segment_being_filled(ddstage, serve, big):
    """Rank 1 is signalled as soon as the segment it fills appears (not in the descriptor yet,
    rank 0 waiting for the fills): rank 1 frees it and ends, and the load is undone on every
    rank (an error naming rank 1), or, when the ranks finished it first, stands. The others
    serve on; stop then leaves nothing."""
    store = serve(3)
    pids = store.pids()
    load = subprocess.Popen([ddstage.path, "load", "--store", store.dir, big, "--verify", "--streams", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(re.search(r"-g1-[0-9a-f]{12}-r1$", f) for f in store_files(store)):
            assert time.monotonic() < deadline and load.poll() is None, "the load never started"
            time.sleep(0.005)
        os.kill(pids[1], signal.SIGTERM)
        assert wait_dead([pids[1]], timeout=store.within()), store.output()
        assert rank_files(store, 1) == []
        out, err = load.communicate(timeout=60)
        if load.returncode != 0:
            assert_runtime_error(subprocess.CompletedProcess(load.args, load.returncode, out, err), "rank 1")
            assert [f for f in store_files(store) if not f.endswith(".lock")] == [], store.output()
        else:
            assert "loaded 'big'" in out
        assert store.proc.poll() is None, store.output()
        ddstage.ok("stop", "--store", store.dir)
        wait_gone(store, pids, store.within())
        assert_nothing_left(ddstage, store, pids)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()


@pytest.mark.busy
def test_sigint_to_a_one_rank_store_exits_0_and_frees_everything(ddstage, serve, small):
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    assert len(store_files(store)) == 2
    store.proc.send_signal(signal.SIGINT)
    assert store.proc.wait(timeout=store.within()) == 0, store.output()
    assert_nothing_left(ddstage, store, pids)


# ---- peers lost without a signal -------------------------------------------------------------

@pytest.mark.busy
def test_sigkill_of_rank_1_leaves_nothing_once_the_others_are_gone(ddstage, serve, small):
    """SIGKILL cannot be seen by rank 1: the others end (mpiexec's SIGTERM, or their heartbeats
    within peer_timeout) and, finding rank 1's lock unheld on their node, remove its files: the
    first of them to end has swept it, whatever mpiexec's SIGKILL then cuts short."""
    store = serve(3, env=PEER_TIMEOUT)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    os.kill(pids[1], signal.SIGKILL)
    wait_gone(store, pids, store.within(LAUNCHER_TEARDOWN_S))
    assert_nothing_left(ddstage, store, pids, launcher_may_kill=(0, 2))


@pytest.mark.busy
def test_a_stopped_rank_0_ends_the_rest_within_peer_timeout(ddstage, serve, small):
    """SIGSTOP: no signal, no exit; only the heartbeats notice. Rank 0 is the coordinator: the
    other ranks, hearing nothing from it for peer_timeout, free their memory and end; mpiexec
    then ends rank 0, possibly by SIGKILL before it is done (assert_nothing_left)."""
    store = serve(3, env=PEER_TIMEOUT)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    os.kill(pids[0], signal.SIGSTOP)
    try:
        wait_gone(store, pids, store.within(noticed_within(PEER_TIMEOUT_S) + LAUNCHER_TEARDOWN_S))
        out = store.output()
        assert "lost rank 0 on" in out and "freeing this rank's memory and ending" in out, out
        assert rank_files(store, 1) == [] and rank_files(store, 2) == [], out
        assert_nothing_left(ddstage, store, pids, launcher_may_kill=(0,))
    finally:
        if pid_alive(pids[0]):
            os.kill(pids[0], signal.SIGCONT)


@pytest.mark.busy
def test_a_stopped_rank_is_marked_lost_and_never_taken_back(ddstage, serve, small):
    """SIGSTOP of rank 1 under mpiexec --enable-recovery: rank 0 marks it lost after
    peer_timeout and the store serves on; once it runs again, rank 0 refuses its heartbeats, so
    it frees its memory and ends at once instead of serving beside its replacement."""
    store = serve(3, env=PEER_TIMEOUT, mpiexec_args=["--enable-recovery"])
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        wait_marked_lost(store, 1, store.within(noticed_within(PEER_TIMEOUT_S)))
        assert pid_alive(pids[1]) and store.proc.poll() is None
    finally:
        os.kill(pids[1], signal.SIGCONT)
    # Its next heartbeat, one cycle at most, is refused.
    assert wait_dead([pids[1]], timeout=store.within(3 * heartbeat_interval(PEER_TIMEOUT_S))), store.output()
    out = store.wait_output("no longer counts this rank")
    assert "no longer counts this rank in the store" in out and "freeing this rank's memory" in out, out
    assert rank_files(store, 1) == []
    assert store.proc.poll() is None and pid_alive(pids[0]) and pid_alive(pids[2]), out
    assert_not_misjudged(store, live=[0, 2])
    ddstage.ok("stop", "--store", store.dir)
    wait_gone(store, pids, store.within())
    assert_nothing_left(ddstage, store, pids)


# ---- the control protocol ---------------------------------------------------------------------

def last_heard(store, rank):
    """Seconds since rank 0 last heard from `rank`, as a status reply says."""
    return control(store, {"op": "status"})["last_heard"][rank]


@pytest.mark.busy
def test_status_reply_carries_last_heard_and_heartbeats_are_answered(ddstage, serve):
    store = serve(2, env=PEER_TIMEOUT)
    # A heartbeat heard: rank 1's silence, as status reports it, starts again from nothing.
    silence = [last_heard(store, 1)]
    wait_until(lambda: silence.append(last_heard(store, 1)) or silence[-1] < max(silence),
               store.within(3 * heartbeat_interval(PEER_TIMEOUT_S)), lambda: f"rank 1's silence grew: {silence}")
    reply = control(store, {"op": "status"})
    assert reply["ok"] is True
    heard = reply["last_heard"]
    assert len(heard) == 2 and heard[0] == 0 and 0 <= heard[1] < PEER_TIMEOUT_S, reply
    assert control(store, {"op": "heartbeat", "rank": 1}) == {"ok": True}
    for bad in ({"op": "heartbeat", "rank": 7}, {"op": "heartbeat", "rank": 0}, {"op": "heartbeat"}):
        reply = control(store, bad)
        assert reply["ok"] is False and "heartbeat" in reply["error"], reply
    store.stop()


@pytest.mark.busy
def test_stop_of_a_healthy_store_names_every_rank_stopped(ddstage, serve, small):
    store = serve(3)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    reply = control(store, {"op": "stop"})
    assert reply == {"ok": True, "stopped": [0, 1, 2], "unreachable": []}, reply
    assert not (store.dir / "store.yaml").exists()  # before the reply
    assert store.proc.wait(timeout=30) == 0, store.output()
    assert wait_dead(pids)
    assert_nothing_left(ddstage, store, pids)


@pytest.mark.busy
def test_stop_with_a_stopped_rank_is_honest_and_quick(ddstage, serve, small):
    """No wait on a rank that is not answering: rank 0 stops every rank it reaches, says which
    it could not, and the job still ends (that rank within peer_timeout, or by mpiexec). Rank 0
    leaves out a rank silent for three heartbeat intervals; one it asks it would wait as long
    for."""
    peer_timeout_s = 10
    patience = 3 * heartbeat_interval(peer_timeout_s)
    store = serve(3, env={"DDSTAGE_PEER_TIMEOUT": f"{peer_timeout_s}s"})
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    os.kill(pids[2], signal.SIGSTOP)
    try:
        wait_until(lambda: last_heard(store, 2) > patience, store.within(patience), "rank 2 still heard from")
        t0 = time.monotonic()
        reply = control(store, {"op": "stop"})
        took = time.monotonic() - t0
        assert took < patience, f"stop took {took:.2f} s: it waited on the stopped rank ({patience} s)"
        assert reply["ok"] is True and reply["stopped"] == [0, 1], reply
        [lost] = reply["unreachable"]
        assert lost["rank"] == 2 and lost["host"] and lost["last_heard"] >= patience, reply
        assert not (store.dir / "store.yaml").exists()
        wait_gone(store, pids, store.within(LAUNCHER_TEARDOWN_S))
        assert_nothing_left(ddstage, store, pids, launcher_may_kill=(2,))
    finally:
        if pid_alive(pids[2]):
            os.kill(pids[2], signal.SIGCONT)


# ---- addresses only one host reaches ---------------------------------------------------------

def test_loopback_control_address_is_refused_when_the_ranks_span_hosts(ddstage, tmp_path):
    """Each rank in a UTS namespace of its own, with its own host name: to ddstage the ranks
    span two hosts (the network stays this machine's loopback). A control address the other
    hosts could never reach is refused on every rank, exit 2, before anything is published."""
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --uts is not permitted here (needs root or user namespaces)")
    for listen in (["--listen", "127.0.0.1:0"], []):
        store_dir = tmp_path / f"store{len(listen)}"
        # exec keeps the pid: the lines "rank pid N" name the ranks' processes.
        script = 'hostname "fake-node$OMPI_COMM_WORLD_RANK" && echo "rank pid $$" && exec "$@"'
        cmd = ["mpiexec", "-n", "2", "unshare", "--uts", "sh", "-c", script, "sh", ddstage.path, "serve",
               "--store", str(store_dir), "--transport", "shm", *listen]
        out = refused_job_output(cmd, {**os.environ, **MPI_ENV})
        errors = [line for line in out.splitlines() if line.startswith("ddstage: error:")]
        assert errors and all("is loopback (127." in e and "span 2 hosts" in e and "--listen" in e
                              for e in errors), out
        assert not (store_dir / "store.yaml").exists()
        pids = {line.split()[-1] for line in out.splitlines() if line.startswith("rank pid ")}
        assert len(pids) == 2, out
        left = [p.name for p in Path("/dev/shm").glob("ddstage-*.lock") if lock_pid(p) in pids]
        assert left == [], "a refused rank left its lock file"


def refused_job_output(cmd, env):
    """Runs a serve job that must be refused at start; its output. A job that serves instead is
    ended (the whole session) and the test fails."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, out
    return out


def test_loopback_fabric_address_is_refused_when_the_ranks_span_hosts(ddstage, tmp_path):
    """The same two fake hosts, in a network namespace of their own with a veth address
    (10.99.0.1, gone with the namespace) for the control socket, so that only the fabric
    endpoint is on loopback (FI_TCP_IFACE=lo): refused, naming the rank, the address and the
    settings to change."""
    probe = subprocess.run(["unshare", "--net", "--uts", "sh", "-c", "ip link add v0 type veth peer name v1"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("network namespaces with veth links are not permitted here: " + probe.stderr.decode())
    inner = ('hostname "fake-node$OMPI_COMM_WORLD_RANK" && echo "rank pid $$" && exec "$@"')
    outer = ('ip link set lo up && ip link add v0 type veth peer name v1 && ip addr add 10.99.0.1/24 dev v0 && '
             'ip link set v0 up && ip link set v1 up && '
             f'exec mpiexec -n 2 unshare --uts sh -c \'{inner}\' sh "$@"')
    cmd = ["unshare", "--net", "sh", "-c", outer, "sh", ddstage.path, "serve", "--store", str(tmp_path / "store"),
           "--listen", "10.99.0.1:0", "--transport", "fabric"]
    env = {**os.environ, **MPI_ENV, "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}
    out = refused_job_output(cmd, env)
    errors = [line for line in out.splitlines() if line.startswith("ddstage: error:")]
    assert errors, out
    for e in errors:
        for words in ("rank 0 on fake-node0", "libfabric address 127.0.0.1", "loopback", "span 2 hosts",
                      "FI_TCP_IFACE", "fabric.domain"):
            assert words in e, (words, e)
    assert not (tmp_path / "store" / "store.yaml").exists()
    pids = {line.split()[-1] for line in out.splitlines() if line.startswith("rank pid ")}
    assert len(pids) == 2, out
    assert [p.name for p in Path("/dev/shm").glob("ddstage-*.lock") if lock_pid(p) in pids] == []


# ---- errors while serving ---------------------------------------------------------------------

def normal_start_up_s(serve):
    """How long a healthy 2-rank store takes to start on this machine now (then stopped): the
    baseline of a test whose own job never serves."""
    store = serve(2, name="baseline")
    store.stop()
    return store.start_s


def ends_within(start_up_s):
    """A job that fails in or right after start-up: its start-up, then peer_timeout's notice or
    mpiexec's teardown, then ending and reaping its processes."""
    return noticed_within(PEER_TIMEOUT_S) + LAUNCHER_TEARDOWN_S + (1 + STARTUPS) * start_up_s


@pytest.mark.busy
def test_an_error_while_serving_ends_every_rank_and_frees_everything(ddstage, serve, tmp_path):
    """store.yaml cannot be written when the store is ready (its disk is full): no caller can
    keep the ranks in step any more, so rank 0 frees what it holds and ends (exit 1), and the
    others end with it instead of waiting in a broadcast or in MPI_Finalize."""
    small = tmp_path / "small"
    small.mkdir(mode=0o700)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", small]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        start_up_s = normal_start_up_s(serve)
        (small / "store").mkdir(mode=0o700)
        fill_up(small)
        cmd = ["mpiexec", "-n", "2", "sh", "-c", 'echo "rank pid $$" && exec "$@"', "sh", ddstage.path, "serve",
               "--store", str(small / "store"), "--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **MPI_ENV, **PEER_TIMEOUT}, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=ends_within(start_up_s))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode != 0, out
        assert "rank 0 on" in out and "cannot go on serving" in out and "store.yaml" in out, out
        pids = {line.split()[-1] for line in out.splitlines() if line.startswith("rank pid ")}
        assert len(pids) == 2, out
        assert wait_dead([int(p) for p in pids])
        assert [p.name for p in Path("/dev/shm").glob("ddstage-*.lock") if lock_pid(p) in pids] == []
    finally:
        subprocess.run(["umount", "-l", small])


# ---- replacing a store that does not answer ---------------------------------------------------

def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("rank0", ["on another host", "on this host, no id"])
def test_serve_never_replaces_a_silent_store_not_proven_gone(ddstage, serve, small, tmp_path, rank0):
    """A store.yaml whose control does not answer is replaced only when its rank 0 ran here and
    is proven gone. Rank 0 on another host (whose lock this host cannot see), or an older
    ddstage's descriptor (no id, so no lock) whose rank 0's pid runs here: serve refuses, exit 2,
    and keeps it; the live store it was copied from goes on serving."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    segments = store.segments()
    d = yaml.safe_load((store.dir / "store.yaml").read_text())
    d["control"] = f"127.0.0.1:{closed_port()}"
    if rank0 == "on another host":
        d["id"] = os.urandom(6).hex()
        d["ranks"][0]["host"] = "node-elsewhere"
    else:
        del d["id"]
    other = tmp_path / "copy"
    other.mkdir(mode=0o700)
    text = yaml.safe_dump(d)
    (other / "store.yaml").write_text(text)
    (other / "store.yaml").chmod(0o600)
    proc = subprocess.run([ddstage.path, "serve", "--store", other, "--listen", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **MPI_ENV})
    host = "node-elsewhere" if rank0 == "on another host" else d["ranks"][0]["host"]
    assert_usage_error(proc, "does not answer", f"rank 0 on {host}", "not proven gone", "ddstage stop --store")
    assert (other / "store.yaml").read_text() == text
    assert store.segments() == segments
    assert control(store, {"op": "status"})["ok"]
    assert ddstage.ok("read", "--store", store.dir, "--dataset", "s", "--ids", "0", binary=True).stdout
    store.stop()


# ---- start-up ---------------------------------------------------------------------------------

# Preloaded into rank 1 alone: once it holds its rank lock (start-up has begun), it stops itself
# at its first statvfs (working out its memory limit, between start-up collectives), as a rank
# whose node hangs mid-start-up would.
STOP_IN_STARTUP_C = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int holds_rank1_lock(void) {
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  char link[64], target[512];
  int found = 0;
  while (d && (e = readdir(d))) {
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 8 && (target[n] = 0, strcmp(target + n - 8, "-r1.lock") == 0)) found = 1;
  }
  if (d) closedir(d);
  return found;
}

int statvfs(const char* path, struct statvfs* buf) {
  int (*real)(const char*, struct statvfs*) = (int (*)(const char*, struct statvfs*))dlsym(RTLD_NEXT, "statvfs");
  if (holds_rank1_lock()) raise(SIGSTOP);
  return real(path, buf);
}
"""


@pytest.mark.busy
def test_a_rank_lost_during_start_up_ends_the_store(ddstage, serve, tmp_path):
    """Heartbeats and rank 0's watch start as soon as the store id is known: a rank that stops
    between the start-up collectives ends rank 0 within peer_timeout, instead of leaving it
    blocked in a collective for ever, and nothing is published."""
    shim = tmp_path / "stop_in_startup.so"
    src = tmp_path / "stop_in_startup.c"
    src.write_text(STOP_IN_STARTUP_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, src, "-ldl"], check=True)
    start_up_s = normal_start_up_s(serve)
    store_dir = tmp_path / "store"
    serve = [ddstage.path, "serve", "--store", str(store_dir), "--listen", "127.0.0.1:0"]
    cmd = ["mpiexec", "-n", "1", *serve, ":", "-n", "1", "env", f"LD_PRELOAD={shim}", *serve]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **MPI_ENV, **PEER_TIMEOUT}, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=ends_within(start_up_s))
    finally:
        if proc.poll() is None:  # rank 0 waits in a collective for ever: end the job, then fail
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "lost rank 1" in out and "no heartbeat" in out, out
    assert proc.returncode != 0, out
    assert not (store_dir / "store.yaml").exists()


@pytest.mark.busy
def test_ranks_end_and_free_everything_when_mpiexec_is_killed(ddstage, serve, small):
    """MPI is finalised once the store serves, so nothing of MPI ends a rank whose launcher is
    SIGKILLed (the ranks sit in process groups of their own): each sees its parent gone and
    ends, freeing what it holds."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, small, "--name", "s")
    pids = store.pids()
    os.killpg(store.proc.pid, signal.SIGKILL)
    store.proc.wait(timeout=30)
    assert wait_dead(pids, timeout=store.within()), store.output()
    assert_nothing_left(ddstage, store, pids)
