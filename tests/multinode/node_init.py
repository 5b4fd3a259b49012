"""PID 1 of a simulated node (tests/multinode/cluster.py starts it in fresh PID, UTS, IPC and mount
namespaces inside the node's network namespace).

It gives the node its host name and private tmpfs on /dev/shm and /tmp (with the paths given after
the name, under /tmp, bound back), says "ready", then only
reaps the orphans that end up under it. Killing it with SIGKILL is a node crash: the kernel then
kills every process of the node, and its tmpfs go with the last of them."""
import os
import signal
import socket
import subprocess
import sys

name, kept = sys.argv[1], sys.argv[2:]
socket.sethostname(name)


def mount(*argv):
    subprocess.run(["mount", *argv], check=True)


mount("-t", "tmpfs", "-o", "mode=1777", f"{name}-tmpfs", "/dev/shm")
# The paths under /tmp that every node shares (the tree under test, when it lives in /tmp) are
# bound back into the private /tmp, from the host's /tmp reached through a mount point on the
# new /dev/shm (this namespace's mounts are private: nothing of this shows outside the node).
host_tmp = "/dev/shm/.host-tmp"
if kept:
    os.mkdir(host_tmp)
    mount("--rbind", "/tmp", host_tmp)
mount("-t", "tmpfs", "-o", "mode=1777", f"{name}-tmpfs", "/tmp")
for path in kept:
    os.makedirs(path, exist_ok=True)
    mount("--rbind", os.path.join(host_tmp, os.path.relpath(path, "/tmp")), path)
if kept:
    subprocess.run(["umount", "-l", host_tmp], check=True)
    os.rmdir(host_tmp)

# The kernel spares a namespace's PID 1 every signal it has no handler for: Python's SIGINT
# handler would let a stray ^C-like signal from inside the node take the whole node down.
signal.signal(signal.SIGINT, signal.SIG_DFL)
# SIGCHLD stays blocked so that no exit can slip between a reap and the wait for the next one.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
print("ready", flush=True)
os.close(1)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    signal.sigwaitinfo({signal.SIGCHLD})
