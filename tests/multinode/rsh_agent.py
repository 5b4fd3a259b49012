#!/usr/bin/python3
"""ssh stand-in for OpenMPI's plm_rsh_agent on simulated nodes: `rsh_agent.py [-opts] HOST CMD...`
runs CMD (joined, through /bin/sh, as ssh does) inside node HOST and exits with its status.

A process in one node cannot enter a sibling node's PID namespace, so the agent passes the
command and its own stdin/stdout/stderr to the harness (cluster.py) over the unix socket named by
DDSTAGE_MULTINODE_RSH, and stays attached until the command ends: mpiexec sees a remote daemon
die (a node crash) as its agent's exit, and ending the agent ends the remote command."""
import json
import os
import socket
import sys

args = sys.argv[1:]
while args and args[0].startswith("-"):  # ssh options OpenMPI may add
    args.pop(0)
if len(args) < 2:
    sys.exit("usage: rsh_agent.py HOST COMMAND...")
host, command = args[0], " ".join(args[1:])
try:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(os.environ["DDSTAGE_MULTINODE_RSH"])
    socket.send_fds(sock, [json.dumps({"host": host, "command": command}).encode()], [0, 1, 2])
    status = sock.recv(4)
except (KeyError, OSError) as e:
    sys.exit(f"rsh_agent: cannot reach the cluster harness: {e!r}")
# No status: the harness is gone (as ssh's 255 when the connection drops).
sys.exit(int.from_bytes(status, "little") if len(status) == 4 else 255)
