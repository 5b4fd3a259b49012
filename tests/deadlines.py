"""Deadlines that hold on a busy machine (issue 31), for the CLI and Python tests alike.

A test that says something happens "promptly" or "within N s" states its bound as a multiple of
what the same test measured first on this machine, under this load (a normal command's wall
time: `Store.start_s`, a normal batch) or of a configured timeout (peer_timeout, read_timeout,
control_timeout, OpenMPI's kill sequence), never as a bare number of seconds. A test that waits
for something to happen polls for it, bounded, instead of sleeping."""
import os
import time

# Processes of a job start, end and are reaped within this many of that job's start-ups (the
# measured baseline): what a rank does on its way out (free its memory, its exit grace) and what
# mpiexec does once it sees a rank gone. Every core busy slows both alike.
STARTUPS = 3

# OpenMPI's wait between the signals of its kill sequence (SIGCONT, SIGTERM, SIGKILL) when a
# rank fails: mpiexec's odls_base_sigkill_timeout. Each wait is cut short by any child's exit.
SIGKILL_TIMEOUT_S = float(os.environ.get("OMPI_MCA_odls_base_sigkill_timeout", "1"))
# mpiexec ending what is left of a job: SIGCONT, a wait, SIGTERM, a wait, SIGKILL.
LAUNCHER_TEARDOWN_S = 2 * SIGKILL_TIMEOUT_S


def heartbeat_interval(peer_timeout_s):
    """The ranks' heartbeat interval, as ddstage-settings(7) documents it."""
    return max(0.5, peer_timeout_s / 10)


def noticed_within(peer_timeout_s):
    """The longest a lost peer goes unnoticed: peer_timeout of silence, seen once per heartbeat
    cycle (an interval's sleep, then a request that waits up to two intervals)."""
    return peer_timeout_s + 3 * heartbeat_interval(peer_timeout_s)


def wait_until(condition, timeout_s, what, poll_s=0.05):
    """Polls condition() until it returns something true, which it returns; fails after
    timeout_s with what (a string, or a callable building one late: a log, a state)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:.1f} s: {what() if callable(what) else what}")
        time.sleep(poll_s)


def timed(f, *args, **kw):
    """f(*args, **kw) and the seconds it took."""
    t0 = time.monotonic()
    result = f(*args, **kw)
    return result, time.monotonic() - t0
