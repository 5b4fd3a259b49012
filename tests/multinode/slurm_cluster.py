"""A real Slurm 22.05 (Debian's slurm-wlm) on simulated nodes (cluster.py), for tests of batch
jobs: munged and slurmctld in the root namespace, slurmctld listening on the bridge address,
one slurmd inside each node.

Everything lives in one private directory: slurm.conf (every daemon and client finds it through
SLURM_CONF), a munge key made for this run, munged's socket, the controller's state and the
logs. Each slurmd keeps its spool in its node's private /tmp. close() kills every daemon it
started, by pid, whatever happened before.
"""
import os
import re
import signal
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from cluster import _die_with_parent, _sh

CTLD_PORT = 6917  # not Slurm's defaults: a site Slurm on this machine keeps its ports
SLURMD_PORT = 6918
CPUS_PER_NODE = 4  # more than the machine has: jobs here wait on each other, not on cores
START_TIMEOUT_S = 30
TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged", "mungekey")


def require_slurm():
    """Skips (visibly) where Slurm or munge is not installed."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            pytest.skip(f"the Slurm tier needs `{tool}` (scripts/install-deps installs slurm-wlm and munge)")


def slurm_conf(cluster, directory, munge_socket):
    # MpiDefault=none, as on many sites: slurm-job.sh must ask for PMIx itself.
    nodes = "".join(f"NodeName={n.name} NodeAddr={n.address} CPUs={CPUS_PER_NODE} State=UNKNOWN\n"
                    for n in cluster.nodes)
    return f"""ClusterName=ddstage-test
SlurmctldHost={socket.gethostname()}({cluster.bridge_address})
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
SchedulerType=sched/builtin
StateSaveLocation={directory}/state
SlurmdSpoolDir=/tmp/slurmd
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile=/tmp/slurmd.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd-%n.log
PlugStackConfig={directory}/plugstack.conf
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SlurmdTimeout=30
MessageTimeout=5
KillWait=2
InactiveLimit=0
MinJobAge=600
JobRequeue=1
{nodes}PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


# slurmd 22.05 looks for cgroup v1 hierarchies even with proctrack/linuxproc and task/none, and
# `ip netns exec` gave the node a fresh /sys without them: a stub tree is enough.
STUB_CGROUP = ("mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && "
               "mkdir /sys/fs/cgroup/freezer /sys/fs/cgroup/systemd && "
               "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd && "
               "mount -t cgroup -o freezer cgroup /sys/fs/cgroup/freezer && mkdir -p /tmp/slurmd && ")


class SlurmCluster:
    """Slurm on every node of `cluster`, configured in `directory` (created, shared by every
    node). Use as a context manager."""

    def __init__(self, cluster, directory):
        self.cluster = cluster
        self.dir = Path(directory)
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        # Jobs inherit OMPI_MCA_pml=ob1 from sbatch's environment: see ddstage_mpi_env in
        # tests/CMakeLists.txt.
        self.env = {"SLURM_CONF": str(self.conf), "OMPI_MCA_pml": "ob1"}
        self._daemons = []  # (name, Popen) in start order

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- set-up and tear-down -----------------------------------------------------------------

    def start(self):
        try:
            self._write_config()
            self._start_munged()
            self._start_slurmctld()
            for node in self.cluster.nodes:
                self._start_slurmd(node)
            self._wait_nodes_idle()
        except BaseException:
            self.close()
            raise

    def _write_config(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "state").mkdir(parents=True)
        # munged insists on a key and socket directory only root can write.
        (self.dir / "munge").mkdir(mode=0o700)
        (self.dir / "plugstack.conf").write_text("")
        self.conf.write_text(slurm_conf(self.cluster, self.dir, self.munge_socket))
        _sh("mungekey", "--create", "--keyfile", str(self.dir / "munge" / "munge.key"))

    def _spawn(self, name, popen):
        log = open(self.dir / f"{name}.out", "w")
        proc = popen(stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._daemons.append((name, proc))
        return proc

    def _start_munged(self):
        m = self.dir / "munge"
        self._spawn("munged", lambda **kw: subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={self.munge_socket}", f"--key-file={m / 'munge.key'}",
             f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'seed'}"],
            preexec_fn=_die_with_parent, **kw))
        self._wait_for(self.munge_socket.exists, "munged did not create its socket")

    def _start_slurmctld(self):
        self._spawn("slurmctld", lambda **kw: subprocess.Popen(
            ["slurmctld", "-D", "-i"], env={**os.environ, **self.env}, preexec_fn=_die_with_parent, **kw))

    def _start_slurmd(self, node):
        self._spawn(f"slurmd-{node.name}", lambda **kw: node.popen(
            ["sh", "-c", STUB_CGROUP + 'exec slurmd -D -N "$1"', "slurmd", node.name], env=self.env, **kw))

    def _wait_nodes_idle(self):
        def idle():
            out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
            states = dict(line.split() for line in out.splitlines() if line.strip())
            return all(states.get(n.name) == "idle" for n in self.cluster.nodes)
        self._wait_for(idle, "the nodes did not register with slurmctld as idle")

    def _wait_for(self, ready, what):
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            for name, proc in self._daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} in {START_TIMEOUT_S} s:\n{self.logs()}")
            time.sleep(0.2)

    def close(self):
        """Kills every daemon this cluster started, by pid: SIGTERM, then SIGKILL after 5 s. A
        slurmd's pid is its nsenter's, whose death SIGKILLs it (the node's pdeathsig)."""
        for _, proc in reversed(self._daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self._daemons):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._daemons = []

    def logs(self, tail=30):
        """The last lines of every daemon's log: what a failed test shows."""
        parts = []
        for path in sorted(self.dir.glob("*.out")) + sorted(self.dir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---- clients ------------------------------------------------------------------------------

    def run(self, argv, check=True, node=None, env=None, timeout=60):
        """A Slurm client (sbatch, scontrol, ...) inside `node` (default: the first), as a user on
        a login node would run it."""
        node = node or self.cluster.nodes[0]
        return node.run(argv, env={**self.env, **(env or {})}, check=check, timeout=timeout)

    def sbatch(self, argv, env=None):
        """Submits a batch job (`sbatch --parsable ARGV`); returns its id."""
        out = self.run(["sbatch", "--parsable", *argv], env=env).stdout
        return int(out.strip().split(";")[0])

    def job(self, job_id):
        """The job's fields from `scontrol show job` (accounting is not configured)."""
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(self, job_id, states, timeout):
        """Polls until the job's JobState is one of states; returns its fields, or fails the test
        with the job's fields and the daemons' logs."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} not {'/'.join(states)} after {timeout} s: {job}\n{self.logs()}")
            time.sleep(0.25)
