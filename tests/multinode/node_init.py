"""PID 1 of a simulated node (tests/multinode/cluster.py starts it in fresh PID, UTS, IPC and mount
namespaces inside the node's network namespace).

It gives the node its host name and private tmpfs on /dev/shm and /tmp, says "ready", then only
reaps the orphans that end up under it. Killing it with SIGKILL is a node crash: the kernel then
kills every process of the node, and its tmpfs go with the last of them."""
import os
import signal
import socket
import subprocess
import sys

name = sys.argv[1]
socket.sethostname(name)
for mount_point in ("/dev/shm", "/tmp"):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", f"{name}-tmpfs", mount_point], check=True)

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
