"""share/ddstage/slurm-job.sh under a real Slurm (slurm_cluster.py) on simulated nodes, on one
node and on two: the job's training sees a store with one rank per node, the job's state and exit
code are the training's, and whatever ends the job (success, failure, scancel, time limit,
requeue after a hard kill) leaves on every node no ddstage process, no ddstage shared memory and
no store directory.

Nodes sl1 and sl2 run one job at a time; sl3 and sl4 run the two time-limited jobs, submitted at
the start of the module because Slurm's limit is at least a minute: they run out while the
other cases run."""
import json
import math
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from cluster import Cluster, require_namespaces
from conftest import BIN, GEN, local, store_files, wait_no_ddstage
from slurm_cluster import SlurmCluster, require_slurm

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent.parent / "share" / "ddstage" / "slurm-job.sh"
TRAIN = HERE / "slurm_train_check.py"
TASKS_PER_NODE = 2
JOB_TIMEOUT_S = 120
# The limit a job gets, plus up to 30 s until slurmctld's periodic check notices.
TIME_LIMIT_TIMEOUT_S = 60 + 30 + JOB_TIMEOUT_S
CLEAN_TIMEOUT_S = 15
SLURMD_SPOOL = "/tmp/slurmd"  # SlurmdSpoolDir in slurm_cluster.py: each node's own /tmp
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@pytest.fixture(scope="module")
def slurm():
    require_namespaces()
    require_slurm()
    with Cluster(n=4, subnet="10.9.1", name_prefix="sl") as cluster:
        with SlurmCluster(cluster, cluster.work_dir / "slurm-sl") as s:
            yield s


@pytest.fixture(scope="module")
def work(slurm):
    """This module's directory, seen by every node (not conftest's: that one builds a cluster)."""
    path = slurm.cluster.work_dir / "test_slurm_job"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Jobs:
    """Submits slurm-job.sh with this module's dataset and training check, and checks what a job
    leaves behind."""

    def __init__(self, slurm, work):
        self.slurm = slurm
        self.work = work
        self.scratch = work / "scratch"  # $SCRATCH: where the script puts its store directories
        self.markers = work / "markers"
        self.scratch.mkdir()
        self.markers.mkdir()
        self.ddx = work / "train.ddx"
        local([GEN, "npy", work / "train.npy", "--samples", "1000"])
        local([BIN, "flatten", work / "train.npy", "-o", self.ddx])
        self.env = {"PATH": f"{Path(BIN).resolve().parent}:{os.environ['PATH']}", "SCRATCH": str(self.scratch)}
        self.submitted = []

    def nodes(self, names):
        return [self.slurm.cluster.node(n) for n in names]

    def submit(self, nodes, action=None, sbatch=()):
        """slurm-job.sh on `nodes` (names) with TASKS_PER_NODE tasks each; training is
        slurm_train_check.py ACTION, or the script's own test batch when action is None."""
        training = ["--", "/usr/bin/python3", TRAIN, self.ddx, self.markers, action] if action else []
        job_id = self.slurm.sbatch(["-N", str(len(nodes)), "-w", ",".join(nodes),
                                  f"--ntasks-per-node={TASKS_PER_NODE}", "-D", self.work,
                                  "-o", self.work / "job-%j.out", *sbatch, SCRIPT, self.ddx, *training],
                                 env=self.env)
        self.submitted.append(job_id)
        return job_id

    def cancel_running(self, job_ids):
        """Ends what a failed case left running, so the next case starts on idle nodes."""
        running = [j for j in job_ids if self.slurm.job(j).get("JobState") not in ENDED]
        if running:
            self.slurm.run(["scancel", *map(str, running)])
            for job_id in running:
                self.wait(job_id, "ended")

    def output(self, job_id):
        path = self.work / f"job-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else "(no output file)"

    def wait(self, job_id, states, timeout=JOB_TIMEOUT_S):
        return self.slurm.wait_job(job_id, ENDED if states == "ended" else states, timeout)

    def markers_of(self, job_id, run=0):
        return {p.name: json.loads(p.read_text()) for p in self.markers.glob(f"{job_id}.{run}.*")
                if not p.name.endswith(".tmp")}

    def wait_training(self, job_id, tasks, run=0):
        """Until every task of the training step has checked its batch (bounded)."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while len(self.markers_of(job_id, run)) < tasks:
            job = self.slurm.job(job_id)
            assert job["JobState"] in ("PENDING", "RUNNING"), f"{job}\n{self.output(job_id)}"
            assert time.monotonic() < deadline, f"training of job {job_id} did not start:\n{self.output(job_id)}"
            time.sleep(0.25)
        return self.markers_of(job_id, run)

    def assert_clean(self, job_id, names):
        """Nothing of the job is left: no ddstage or training process, no ddstage-* file in any
        node's /dev/shm, no store directory."""
        nodes = self.nodes(names)
        left = wait_no_ddstage(nodes, CLEAN_TIMEOUT_S)
        assert not left, f"job {job_id} left ddstage processes: {left}\n{self.output(job_id)}"
        training = {n.name: [p for p in n.processes() if TRAIN.name in p[1]] for n in nodes}
        assert not any(training.values()), f"training processes left: {training}"
        shm = {n.name: store_files(n) for n in nodes}
        assert not any(shm.values()), f"job {job_id} left shared memory: {shm}\n{self.output(job_id)}"
        stores = sorted(p.name for p in self.scratch.glob(f"ddstage-store-{job_id}.*"))
        assert not stores, f"job {job_id} left store directories: {stores}\n{self.output(job_id)}"


@pytest.fixture(scope="module")
def jobs(slurm, work):
    return Jobs(slurm, work)


@pytest.fixture(autouse=True)
def no_job_outlives_its_case(jobs, time_limited):
    before = len(jobs.submitted)
    yield
    jobs.cancel_running([j for j in jobs.submitted[before:] if j not in time_limited.values()])


@pytest.fixture(scope="module")
def time_limited(jobs):
    """The two jobs that run out of time (on sl3, and on sl3 and sl4): submitted with the first
    test, checked by the last."""
    return {1: jobs.submit(["sl3"], "sleep", sbatch=["--time=1"]),
            2: jobs.submit(["sl3", "sl4"], "sleep", sbatch=["--time=1"])}


# Every case runs `ddstage wait`, `ddstage clean` and reads through $DDSTAGE_STORE (the control
# branch of issue 12).
pytestmark = pytest.mark.needs_issue12
NODE_SETS = pytest.mark.parametrize("names", [["sl1"], ["sl1", "sl2"]], ids=["1node", "2nodes"])


def assert_ended(jobs, job_id, state, exit_code):
    job = jobs.wait(job_id, "ended")
    assert (job["JobState"], job["ExitCode"]) == (state, f"{exit_code}:0"), \
        f"{job}\n{jobs.output(job_id)}\n{jobs.slurm.logs()}"
    return job


@NODE_SETS
def test_training_succeeds(jobs, names):
    job_id = jobs.submit(names, "ok")
    assert_ended(jobs, job_id, "COMPLETED", 0)
    seen = jobs.markers_of(job_id)
    # Every task trained, on every node; the store had one rank per node, whatever the tasks.
    assert len(seen) == TASKS_PER_NODE * len(names), seen
    assert {m["host"] for m in seen.values()} == set(names)
    for m in seen.values():
        assert sorted(m["rank_hosts"]) == sorted(names), m
    jobs.assert_clean(job_id, names)


def test_default_step_reads_a_verified_batch(jobs):
    names = ["sl1", "sl2"]
    job_id = jobs.submit(names)
    assert_ended(jobs, job_id, "COMPLETED", 0)
    out = jobs.output(job_id)
    lines = [l for l in out.splitlines() if "read and verified" in l]
    assert len(lines) == TASKS_PER_NODE * len(names), out
    assert "samples 0-127" in lines[0] and "(401408 bytes)" in lines[0], lines
    jobs.assert_clean(job_id, names)


@NODE_SETS
def test_training_fails(jobs, names):
    job_id = jobs.submit(names, "fail")
    assert_ended(jobs, job_id, "FAILED", 1)
    assert len(jobs.markers_of(job_id)) == TASKS_PER_NODE * len(names)
    jobs.assert_clean(job_id, names)


@NODE_SETS
def test_scancel_during_training(jobs, names):
    job_id = jobs.submit(names, "sleep")
    jobs.wait_training(job_id, TASKS_PER_NODE * len(names))
    jobs.slurm.run(["scancel", str(job_id)])
    jobs.wait(job_id, ["CANCELLED"])
    jobs.assert_clean(job_id, names)


def start_requeued(jobs, job_id, names):
    """`scontrol requeue`, and the requeued job started at once: slurmctld holds a requeued job
    back for two minutes, which a test need not wait. A job that already ended is requeued only
    once its nodes are idle again and no slurmstepd of the killed run, nor its socket in the
    spool directory, is left on them: slurmd refuses to launch a job whose step socket it still
    finds ("already running, do not launch second copy").

    Ending a run makes each slurmd revoke the job's credential at the time of slurmctld's
    terminate request, in whole seconds, and slurmd refuses any credential created at or before
    that second ("Job N already killed, do not launch batch job"; a requeued run failing in
    no time, exit 1, with no output, was seen in CI). So the requeued run is released only once
    the clock has left the second in which the previous run was seen to end."""
    if jobs.slurm.job(job_id)["JobState"] in ENDED:
        nodes = jobs.slurm.job(job_id)["NodeList"]
        deadline = time.monotonic() + JOB_TIMEOUT_S

        def settled():
            idle = set(jobs.slurm.run(["sinfo", "-h", "-n", nodes, "-o", "%t"]).stdout.split()) == {"idle"}
            steps = [cmd for node in jobs.nodes(names) for _, cmd in node.processes() if f"[{job_id}." in cmd]
            sockets = [name for node in jobs.nodes(names) for name in node.run(["ls", SLURMD_SPOOL]).stdout.split()
                       if name.startswith(f"{node.name}_{job_id}.")]
            return idle and not steps and not sockets

        while not settled():
            assert time.monotonic() < deadline, jobs.slurm.run(["sinfo", "-n", nodes]).stdout
            time.sleep(0.25)
    jobs.slurm.run(["scontrol", "requeue", str(job_id)])
    jobs.wait(job_id, ["PENDING"])
    ended = time.time()
    time.sleep(math.floor(ended) + 1.1 - ended)
    jobs.slurm.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])


@NODE_SETS
def test_requeue_during_training(jobs, names):
    """Slurm ends the running job (SIGTERM to the batch shell and every step), then runs it again
    from the start: the second run gets a store of its own and completes."""
    job_id = jobs.submit(names, "sleep-first-run")
    jobs.wait_training(job_id, TASKS_PER_NODE * len(names))
    start_requeued(jobs, job_id, names)
    job = assert_ended(jobs, job_id, "COMPLETED", 0)
    assert job["Restarts"] == "1", job
    assert len(jobs.markers_of(job_id, run=1)) == TASKS_PER_NODE * len(names), jobs.output(job_id)
    jobs.assert_clean(job_id, names)


@NODE_SETS
def test_requeue_after_a_hard_kill(jobs, names):
    """The first run dies without its epilogue (the batch shell and every store rank SIGKILLed,
    as on a node failure): its store.yaml and every node's segments stay. The requeued run
    finds them, cleans them and completes."""
    job_id = jobs.submit(names, "sleep-first-run")
    jobs.wait_training(job_id, TASKS_PER_NODE * len(names))
    batch = [pid for pid, cmd in jobs.nodes(names)[0].processes() if f"job{job_id:05d}/slurm_script" in cmd]
    ranks = [pid for node in jobs.nodes(names) for pid, cmd in node.ddstage_processes() if " serve " in cmd]
    assert batch and len(ranks) == len(names), (batch, ranks)
    for pid in batch + ranks:
        os.kill(pid, signal.SIGKILL)
    jobs.wait(job_id, "ended")
    first_store = jobs.scratch / f"ddstage-store-{job_id}.0"
    assert (first_store / "store.yaml").exists()
    assert all(store_files(node) for node in jobs.nodes(names)), "the killed ranks left no segment to find"

    start_requeued(jobs, job_id, names)
    job = assert_ended(jobs, job_id, "COMPLETED", 0)
    assert job["Restarts"] == "1", job
    assert len(jobs.markers_of(job_id, run=1)) == TASKS_PER_NODE * len(names), jobs.output(job_id)
    jobs.assert_clean(job_id, names)


def test_time_limit(jobs, time_limited):
    for job_id in time_limited.values():
        jobs.wait(job_id, ["TIMEOUT"], TIME_LIMIT_TIMEOUT_S)
    for nodes, job_id in time_limited.items():
        assert len(jobs.markers_of(job_id)) == TASKS_PER_NODE * nodes, jobs.output(job_id)
    for job_id in time_limited.values():
        jobs.assert_clean(job_id, ["sl3", "sl4"])
