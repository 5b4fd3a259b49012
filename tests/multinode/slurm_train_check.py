#!/usr/bin/python3
"""The training command of the Slurm tests (test_slurm_job.py), run by slurm-job.sh on every task:
`slurm_train_check.py DATASET.ddx MARKERS ACTION`.

Each task reads a batch from the store named by $DDSTAGE_STORE and insists it is byte-identical
to the same samples read straight from origin, then records in MARKERS/JOB.RUN.TASK what it saw
(its host, the store's rank hosts) so the test knows training ran and where the ranks were.
Then ACTION: `ok` exits 0, `fail` exits 1, `sleep` sleeps until killed, `sleep-first-run` sleeps
on the job's first run and exits 0 on a requeued run."""
import json
import os
import socket
import subprocess
import sys
import time

import yaml

ddx, markers, action = sys.argv[1:4]
task = int(os.environ["SLURM_PROCID"])
run = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
store = os.environ["DDSTAGE_STORE"]
ids = f"{task * 50}-{task * 50 + 49}"


def read(*args, env=None):
    return subprocess.run(["ddstage", "read", *args, "--ids", ids], check=True, capture_output=True,
                          timeout=60, env=env).stdout


# The store as a training job finds it: no --store, only $DDSTAGE_STORE from slurm-job.sh.
from_store = read("--dataset", "train", "--verify")
origin_env = {k: v for k, v in os.environ.items() if k != "DDSTAGE_STORE"}
if from_store != read(ddx, env=origin_env):
    sys.exit(f"task {task}: samples {ids} from the store differ from origin")
with open(os.path.join(store, "store.yaml")) as f:
    rank_hosts = [r["host"] for r in yaml.safe_load(f)["ranks"]]
marker = os.path.join(markers, f"{os.environ['SLURM_JOB_ID']}.{run}.{task}")
with open(marker + ".tmp", "w") as f:
    json.dump({"host": socket.gethostname(), "rank_hosts": rank_hosts, "bytes": len(from_store)}, f)
os.rename(marker + ".tmp", marker)

if action == "fail":
    sys.exit(1)
if action == "sleep" or (action == "sleep-first-run" and run == 0):
    time.sleep(3600)
