#!/usr/bin/env bash
# Runs COMMAND beside a CPU hog: one spinning stress-ng worker per core, at the tests' own
# priority, as on a training node whose every core the job and its DataLoader workers take. The
# busy tier (ctest -L busy, scripts/test --busy) runs the failure-detection, failover and
# life-cycle cases this way, so that a store which mistakes a slow peer for a dead one, or a
# deadline that only holds on an idle machine, fails here rather than in a user's job.
# Usage: with_cpu_hog.sh SECONDS COMMAND...   SECONDS bounds the hog, even if this script is
# killed. Exit: COMMAND's; 77 (skipped, which ctest reports) without stress-ng.
# DDSTAGE_CPU_HOG_PID: the pid of a hog already spinning on every core (scripts/test starts one
# for the whole tier, so that its tests share it rather than each adding nproc spinners to the
# machine, and niced below a build that keeps every core busy in its place while it lasts); used
# only while it is a live stress-ng, else this script starts its own.
set -euo pipefail
seconds=$1
shift
shared=${DDSTAGE_CPU_HOG_PID:-}
if [[ -n $shared && $(cat "/proc/$shared/comm" 2>/dev/null) == stress-ng* ]]; then
  echo "with_cpu_hog: beside the tier's stress-ng (pid $shared): $*"
  exec "$@"
fi
if ! command -v stress-ng >/dev/null; then
  echo "with_cpu_hog: skipped: no stress-ng to load the machine with (apt-get install stress-ng)"
  exit 77
fi
workers=${DDSTAGE_HOG_WORKERS:-$(nproc)}
stress-ng --cpu "$workers" --timeout "${seconds}s" --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
echo "with_cpu_hog: stress-ng --cpu $workers (pid $hog) beside: $*"
"$@"
