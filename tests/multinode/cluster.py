"""Simulated nodes on one machine, for tests of what crosses a network and what a lost node
leaves behind.

Each node is a set of Linux namespaces around a tiny init (node_init.py):
- network: `ip netns` NAME, a veth pair to a bridge in the root namespace, SUBNET.N/24, lo up;
- UTS (host name NAME), IPC, mount (private tmpfs on /dev/shm and /tmp; everything else, the
  build and data directories included, stays shared: keep test data out of /tmp) and PID (the
  init is PID 1: `crash()` kills it, and the kernel kills the rest of the node with it).
Names resolve through /etc/netns/NAME/hosts (the root's /etc/hosts is never touched).

OpenMPI's mpiexec runs inside nodes[0] and starts its daemons on the other nodes through
rsh_agent, an ssh stand-in: a process inside one node cannot enter a sibling node's PID
namespace, so the agent hands its command (and its stdin/stdout/stderr) to this harness, which
runs it inside the named node and reports its exit status back, as sshd would.

Everything a Cluster creates is removed by close(), which the context manager, atexit and a
later Cluster with the same prefix (after a SIGKILLed run) all call or redo; node processes also
die with the harness process (parent-death signals down to each init).
"""
import atexit
import ctypes
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"


def _kept_under_tmp(work_dir):
    """What every node must see although its /tmp is private: the source tree, the build (the
    binaries, the Python module) and the work directory, where they live under /tmp (a clone in
    /tmp, as CI may make). Outermost paths only; node_init.py binds them back."""
    candidates = [HERE.parents[1], Path(work_dir), Path.cwd()]
    candidates += [Path(os.environ[k]).resolve().parent for k in ("DDSTAGE_BIN", "DDSTAGE_GEN") if os.environ.get(k)]
    candidates += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    tmp = Path("/tmp")
    under_tmp = sorted({p for p in (c.resolve() for c in candidates) if p != tmp and p.is_relative_to(tmp)})
    return [str(p) for p in under_tmp if not any(p != q and p.is_relative_to(q) for q in under_tmp)]
IFACE = "ddnet0"  # the node side of each veth: the same name in every node
BOOT_TIMEOUT_S = 30
PR_SET_PDEATHSIG = 1


def require_namespaces():
    """Skips (visibly) where simulated nodes cannot be built: not root, or tools missing."""
    if os.geteuid() != 0:
        pytest.skip("simulated nodes need root (network, PID and mount namespaces)")
    for tool in ("ip", "unshare", "nsenter", "setpriv", "mount", "mpiexec"):
        if shutil.which(tool) is None:
            pytest.skip(f"simulated nodes need `{tool}` (scripts/install-deps installs it)")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--ipc", "--mount", "--net",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this kernel or container refuses namespaces: {probe.stderr.strip()}")


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _sh(*argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _pid_namespace(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


class Node:
    """One simulated node. `run`/`popen` execute inside all its namespaces."""

    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.name = f"{cluster.prefix}{index}"
        self.address = f"{cluster.subnet}.{index}"
        self.bridge_port = f"{self.name}-br"  # the root side of the veth, on the bridge
        self.iface = IFACE
        self.init_pid = None
        self._pid_ns = None  # kept after a crash, to see the node's last processes die
        self._unshare = None

    # ---- life ---------------------------------------------------------------------------------

    @property
    def up(self):
        return self.init_pid is not None and _pid_namespace(self.init_pid) == self._pid_ns

    def boot(self):
        """Starts the init (a fresh PID, mount, UTS and IPC namespace: empty /dev/shm and /tmp)
        on the node's network as first built (see reset_network)."""
        self.reset_network()
        self._unshare = subprocess.Popen(
            ["ip", "netns", "exec", self.name, "unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc",
             "--uts", "--ipc", "--mount", PYTHON, str(HERE / "node_init.py"), self.name,
             *_kept_under_tmp(self.cluster.work_dir)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_die_with_parent)
        ready, _, _ = select.select([self._unshare.stdout], [], [], BOOT_TIMEOUT_S)
        line = self._unshare.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self._unshare.kill()
            _, err = self._unshare.communicate(timeout=10)
            raise RuntimeError(f"node {self.name} did not boot: {err.strip()}")
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children").read_text().split()
        self.init_pid = int(children[0])
        self._pid_ns = _pid_namespace(self.init_pid)

    def crash(self):
        """kill -9 of the node's PID 1: every process of the node dies at once, its tmpfs with
        them. boot() brings up a fresh node (as after a reboot) on the same network."""
        if self._unshare is None:
            return
        if self.init_pid is not None:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._unshare.wait(timeout=30)
        self._unshare.stdout.close()
        self._unshare.stderr.close()
        self._unshare = None
        # The kernel kills the namespace's processes asynchronously: wait until none is left.
        deadline = time.monotonic() + 30
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._pid_ns = None
        self.init_pid = None

    def reset_network(self):
        """The network namespace outlives a crash, and with it what a case changed (a qdisc, a
        route) and what the kernel remembers: an address resolution begun during a cut (its
        probes lost) ends FAILED even after the heal, and fails the packets queued on it with
        EHOSTUNREACH: a connect() made then, e.g. by mpiexec's daemon on the rebooted node
        calling back, and the next job never starts.
        Back to the state _build_network made: no qdisc, no route but the subnet's, no
        neighbour entry, links up."""
        ns = ["ip", "-n", self.name]
        _sh("tc", "-n", self.name, "qdisc", "del", "dev", IFACE, "root", check=False)  # none: nothing to do
        _sh(*ns, "route", "flush", "dev", IFACE)
        _sh(*ns, "addr", "flush", "dev", IFACE)
        _sh(*ns, "addr", "add", f"{self.address}/24", "dev", IFACE)
        _sh(*ns, "link", "set", IFACE, "up")
        _sh(*ns, "link", "set", "lo", "up")
        _sh(*ns, "neigh", "flush", "dev", IFACE, "nud", "all")
        self.cluster.forget_neighbour(self)
        qdisc = _sh("tc", "-n", self.name, "qdisc", "show", "dev", IFACE).stdout
        routes = _sh(*ns, "-4", "route", "show", "table", "all", "dev", IFACE).stdout
        wanted = f"{self.cluster.subnet}.0/24 "
        if not qdisc.startswith("qdisc noqueue") or any(not (line.startswith(wanted) or line.startswith("local ") or
                                                             line.startswith("broadcast "))
                                                        for line in routes.splitlines()):
            raise RuntimeError(f"node {self.name}: network not reset:\n{qdisc}{routes}")

    def cut(self):
        """Link down on the bridge side of the node's veth: packets to and from the node are
        dropped (as when its cable is pulled); nothing in the node is told."""
        _sh("ip", "link", "set", self.bridge_port, "down")

    def heal(self):
        """Link up again; the node and its peers forget the neighbour entries of the cut (one
        still resolving would fail the next connect(): see reset_network)."""
        _sh("ip", "link", "set", self.bridge_port, "up")
        _sh("ip", "-n", self.name, "neigh", "flush", "dev", IFACE, "nud", "all")
        self.cluster.forget_neighbour(self)

    # ---- inside the node ----------------------------------------------------------------------

    def env(self, extra=None):
        """The environment of a process started on this node: the harness's, the cluster's, the
        node's own interface, then extra."""
        return {**os.environ, **self.cluster.env, "FI_TCP_IFACE": self.iface, "HOSTNAME": self.name,
                **(extra or {})}

    def command(self, argv, cwd=None):
        """argv run inside every namespace of the node; the command is killed (SIGKILL) when the
        nsenter that runs it dies, so a timeout or kill() from the harness reaches it."""
        if not self.up:
            why = f"its init (pid {self.init_pid}) is gone" if self.init_pid else "crashed, not booted again"
            raise RuntimeError(f"node {self.name} is down: {why}")
        return ["nsenter", "-t", str(self.init_pid), "-n", "-u", "-i", "-m", "-p",
                f"--wd={cwd or self.cluster.work_dir}", "--", "setpriv", "--pdeathsig", "KILL", "--",
                *map(str, argv)]

    def popen(self, argv, env=None, cwd=None, **kw):
        return subprocess.Popen(self.command(argv, cwd), env=self.env(env), **kw)

    def run(self, argv, env=None, timeout=60, check=True, input=None, text=True, cwd=None):
        proc = subprocess.run(self.command(argv, cwd), env=self.env(env), capture_output=True, text=text,
                              input=input, timeout=timeout)
        if check and proc.returncode != 0:
            stderr = proc.stderr if text else proc.stderr.decode(errors="replace")
            raise AssertionError(f"on {self.name}: {' '.join(map(str, argv))} exited {proc.returncode}:\n{stderr}")
        return proc

    def processes(self):
        """(pid in the root namespace, command line) of every process in the node, init included."""
        if self._pid_ns is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pid_namespace(entry) == self._pid_ns:
                cmdline = _cmdline(entry)
                if cmdline is not None:
                    found.append((int(entry), cmdline))
        return found

    def ddstage_processes(self):
        """The node's processes whose program is ddstage (or a test binary named ddstage*)."""
        return [(pid, cmd) for pid, cmd in self.processes() if Path(cmd.split(" ")[0]).name.startswith("ddstage")]

    def shm_files(self):
        """Names in the node's /dev/shm (seen through its init's root: its private tmpfs)."""
        if not self.up:
            raise RuntimeError(f"node {self.name} is down: its /dev/shm went with it")
        return sorted(os.listdir(f"/proc/{self.init_pid}/root/dev/shm"))

    def __repr__(self):
        return f"Node({self.name}, {self.address}, {'up' if self.up else 'down'})"


class Cluster:
    """n nodes PREFIX1..PREFIXn at SUBNET.1..n on a bridge PREFIX-br0 at SUBNET.254.

    work_dir (shared by every node: not under /tmp) holds the hostfiles and the rsh socket;
    tests put their data there too. A second Cluster with the same prefix while one runs is
    refused; one found left over by a killed run is removed first."""

    def __init__(self, n=3, subnet="10.9.0", name_prefix="mn", work_dir=None):
        if not re.fullmatch(r"[a-z]{1,6}", name_prefix):
            raise ValueError("name_prefix: 1 to 6 lower-case letters (interface names are short)")
        self.prefix = name_prefix
        self.subnet = subnet
        self.bridge = f"{name_prefix}-br0"
        self.bridge_address = f"{subnet}.254"
        self.work_dir = Path(work_dir or os.environ.get("DDSTAGE_MULTINODE_DIR", "/var/tmp/ddstage-multinode"))
        self.nodes = [Node(self, i) for i in range(1, n + 1)]
        self.env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "DDSTAGE_MULTINODE_RSH": str(self.work_dir / f".{name_prefix}-rsh.sock")}
        self._lock = None
        self._listener = None
        self._accept_thread = None
        self._closed = True

    # ---- set-up and tear-down -----------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self._closed = False
        atexit.register(self.close)
        # SIGTERM (a CI job cancelled) would end the process without atexit: make it an interrupt,
        # which unwinds (and stops pytest) like ^C. SIGKILL cannot be caught: the nodes die with
        # us, and the next start removes the namespaces and links.
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            self._remove_leftovers()
            self._refuse_taken_subnet()
            self._build_network()
            self._start_rsh_server()
            for node in self.nodes:
                node.boot()
        except BaseException:
            self.close()
            raise

    def _take_lock(self):
        path = Path(f"/run/lock/ddstage-multinode-{self.prefix}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(path, "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"another simulated cluster with prefix {self.prefix!r} is running (lock {path})")

    def _own_netns(self):
        out = _sh("ip", "netns", "list").stdout
        return [name for name in re.findall(r"^(\S+)", out, re.M) if re.fullmatch(rf"{self.prefix}\d+", name)]

    def _remove_leftovers(self):
        """What a killed run of this prefix left: its nodes' processes (found by network
        namespace), namespaces, links and hosts files. We hold the lock: none is in use."""
        for name in self._own_netns():
            for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _sh("ip", "netns", "del", name, check=False)
        links = _sh("ip", "-o", "link", "show").stdout
        for port in re.findall(rf"^\d+: ({self.prefix}\d+-br)[@:]", links, re.M):
            _sh("ip", "link", "del", port, check=False)
        if re.search(rf"^\d+: {re.escape(self.bridge)}[@:]", links, re.M):
            _sh("ip", "link", "del", self.bridge)
        for d in Path("/etc/netns").glob(f"{self.prefix}*"):
            if re.fullmatch(rf"{self.prefix}\d+", d.name):
                shutil.rmtree(d, ignore_errors=True)

    def _refuse_taken_subnet(self):
        """Two clusters on one subnet (another prefix) would route each other's packets."""
        taken = [line.split()[1] for line in _sh("ip", "-o", "-4", "addr", "show").stdout.splitlines()
                 if f" {self.subnet}." in line]
        if taken:
            raise RuntimeError(f"subnet {self.subnet}.0/24 is already in use on {', '.join(taken)} (another cluster?)")

    def _hosts(self):
        lines = ["127.0.0.1 localhost", f"{self.bridge_address} {self.prefix}-head {socket.gethostname()}"]
        lines += [f"{node.address} {node.name}" for node in self.nodes]
        return "\n".join(lines) + "\n"

    def _build_network(self):
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for node in self.nodes:
            hosts_dir = Path("/etc/netns") / node.name
            hosts_dir.mkdir(parents=True, exist_ok=True)
            (hosts_dir / "hosts").write_text(self._hosts())
            _sh("ip", "netns", "add", node.name)
            _sh("ip", "link", "add", node.bridge_port, "type", "veth", "peer", "name", IFACE, "netns", node.name)
            _sh("ip", "link", "set", node.bridge_port, "master", self.bridge, "up")
            _sh("ip", "-n", node.name, "addr", "add", f"{node.address}/24", "dev", IFACE)
            _sh("ip", "-n", node.name, "link", "set", IFACE, "up")
            _sh("ip", "-n", node.name, "link", "set", "lo", "up")

    def close(self):
        """Kills every node (and so every process started in one), removes the namespaces, links,
        hosts files and the rsh socket. Safe to call twice and after a failed start."""
        if self._closed:
            return
        self._closed = True
        for node in self.nodes:
            try:
                node.crash()
            except Exception as e:  # keep tearing down the rest
                print(f"cluster: crash of {node.name} at teardown: {e}")
        if self._listener is not None:
            # The accept thread is woken and gone before the descriptor is freed: one still in
            # accept() when the next cluster's listener gets the same number takes that
            # cluster's requests and runs them on this cluster's dead nodes.
            if self._accept_thread is not None:
                self._listener.shutdown(socket.SHUT_RDWR)
                self._accept_thread.join(timeout=30)
            self._listener.close()
            Path(self.env["DDSTAGE_MULTINODE_RSH"]).unlink(missing_ok=True)
        self._remove_leftovers()
        if Path("/etc/netns").is_dir() and not any(Path("/etc/netns").iterdir()):
            Path("/etc/netns").rmdir()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        atexit.unregister(self.close)

    def forget_neighbour(self, node):
        """Every other node drops its neighbour entry of node (one left by a cut fails connects)."""
        for peer in self.nodes:
            if peer is not node:
                _sh("ip", "-n", peer.name, "neigh", "flush", "to", node.address, "dev", IFACE, "nud", "all")

    # ---- MPI ----------------------------------------------------------------------------------

    def node(self, host):
        for node in self.nodes:
            if host in (node.name, node.address):
                return node
        raise KeyError(host)

    def hostfile(self, slots=1, nodes=None):
        """A hostfile (path) listing nodes (default: all) with `slots` slots each."""
        nodes = nodes or self.nodes
        path = self.work_dir / f".{self.prefix}-hosts-{slots}-{'-'.join(str(n.index) for n in nodes)}"
        path.write_text("".join(f"{node.name} slots={slots}\n" for node in nodes))
        return str(path)

    def mpiexec(self, n, argv, per_node=1, env=None, recovery=False):
        """The argv of an OpenMPI job of n ranks, per_node on each of the first nodes, to run
        from nodes[0] (its run/popen). env is exported to every rank (with PATH, PYTHONPATH,
        LD_LIBRARY_PATH); each rank's FI_TCP_IFACE is its own node's.

        recovery: `--enable-recovery`, so that the ranks on the other nodes outlive a node's
        crash. Without it mpiexec (OpenMPI 4.1) ends the whole job within ~2 s of losing a
        node's daemon, MPI_Finalize called or not; `--mca orte_abort_on_non_zero_status 0` alone
        does not help there (it covers a rank's exit, not a daemon's loss). With it mpiexec
        did not end on its own after such a loss (90 s seen) once every surviving rank had exited:
        it waits for the lost daemon. A SIGTERM ends it at once (exit 1), as a job's end would.
        A cut node (its processes alive, unreachable) goes unnoticed, with or without it."""
        used = self.nodes[:-(-n // per_node)]
        if len(used) * per_node < n:
            raise ValueError(f"{n} ranks at {per_node} per node need more than {len(self.nodes)} nodes")
        exports = []
        for key in ["PATH", "PYTHONPATH", "LD_LIBRARY_PATH", *sorted((env or {}).keys())]:
            value = (env or {}).get(key, os.environ.get(key))
            if value is not None:
                exports += ["-x", f"{key}={value}"]
        return ["mpiexec", *(["--enable-recovery"] if recovery else []), "--hostfile", self.hostfile(per_node, used),
                "-n", str(n), "--npernode", str(per_node),
                "--mca", "plm_rsh_agent", str(HERE / "rsh_agent.py"), "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "pml", "ob1",  # not cm: see ddstage_mpi_env in tests/CMakeLists.txt
                "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", f"{self.subnet}.0/24",
                "--mca", "oob_tcp_if_include", f"{self.subnet}.0/24", *exports, *map(str, argv)]

    # ---- the sshd side of rsh_agent -----------------------------------------------------------

    def _start_rsh_server(self):
        path = Path(self.env["DDSTAGE_MULTINODE_RSH"])
        path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._accept_thread = threading.Thread(target=self._accept_rsh, name="rsh-server", daemon=True)
        self._accept_thread.start()

    def _accept_rsh(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # shut down at teardown
            threading.Thread(target=self._rsh_session, args=(conn,), daemon=True).start()

    def _rsh_session(self, conn):
        """One agent call: `HOST COMMAND` with the agent's stdin/stdout/stderr. The command runs
        under /bin/sh on HOST; its exit status goes back; the agent ending (mpiexec killed it)
        kills the command, as sshd does when its connection drops."""
        with conn:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            try:
                request = json.loads(message)
                proc = self.node(request["host"]).popen(["/bin/sh", "-c", request["command"]], stdin=fds[0],
                                                        stdout=fds[1], stderr=fds[2])
            except Exception as e:
                os.write(fds[2], f"rsh_agent: {e}\n".encode())
                conn.send((255).to_bytes(4, "little"))
                return
            finally:
                for fd in fds:
                    os.close(fd)
            while proc.poll() is None:
                readable, _, _ = select.select([conn], [], [], 0.2)
                if readable and not conn.recv(16):
                    proc.kill()
            code = proc.wait()
            try:
                conn.send((code if code >= 0 else 128 - code).to_bytes(4, "little"))
            except OSError:
                pass
