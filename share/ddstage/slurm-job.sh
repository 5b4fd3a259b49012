#!/usr/bin/env bash
# Slurm batch script: stage a flattened dataset into node memory for the length of the job,
# train from it, and free that memory at the end, whatever ends the job.
#
#   sbatch -N 1 --ntasks-per-node=4 share/ddstage/slurm-job.sh /lustre/me/train.ddx
#   sbatch -N 8 --ntasks-per-node=4 --network=job_vni \
#          share/ddstage/slurm-job.sh /lustre/me/train.ddx -- python train.py --epochs 10
#
# What it runs, in job steps on the allocation's nodes:
#   1. `ddstage clean` on every node: segments a killed earlier job (or an earlier run of this
#      job, when it was requeued) left behind; only stores whose ranks are gone are touched.
#   2. `ddstage serve`: ONE store rank per node, whatever --ntasks-per-node says (the srun line
#      sets its own layout rather than inheriting the job's), then `ddstage wait` until every
#      rank answers, and `ddstage load DATASET.ddx --name train --verify`.
#   3. The training command (everything after the index, an optional `--` first) as one step
#      with the job's own task layout: every task finds the store directory in $DDSTAGE_STORE
#      (ddstage commands use it when --store is absent; an app passes it to its Client).
#      Without a command, every task reads a verified test batch and prints a line saying so.
#   4. On every way out (training ends or fails, scancel, time limit, requeue: Slurm sends the
#      batch shell SIGTERM, then SIGKILL after KillWait): `ddstage stop`, `ddstage clean --store`
#      on every node, and the store directory is removed.
# The job's exit status is the training step's (or the test batch's).
#
# The store directory, $SCRATCH (else $HOME)/ddstage-store-JOBID.RESTARTS, holds only
# store.yaml and must be visible on every node; it is named per run so a requeued job never
# mistakes the killed run's descriptor for a live store. The index must be readable by every
# rank. A site epilogue (slurm.conf Epilog=) running `ddstage clean` on each node also covers
# a batch shell killed before its trap could run (node failure, SIGKILL).
#
# srun: the store's ranks form an MPI job. Debian's OpenMPI (4.1) only starts under srun with
# `--mpi=pmix`, which this script passes unless SLURM_MPI_TYPE (srun's own variable) says
# otherwise, e.g. cray_shasta for Cray MPICH. Steps share the nodes with `--overlap`.
#SBATCH --time=01:00:00
# ---- Multi-node on HPE Slingshot (cxi) --------------------------------------------------
# Every job step gets its own VNI, and endpoints on different VNIs cannot talk: the store
# (one step) and training (another step) must share the job-wide VNI. Site-specific:
# uncomment what your site needs (some, e.g. Frontier, also need single_node_vni).
##SBATCH --network=job_vni
##SBATCH --network=job_vni,single_node_vni
set -euo pipefail

usage="usage: slurm-job.sh DATASET.ddx [--] [TRAINING COMMAND...]"
index=${1:?$usage}
shift
if [[ ${1:-} == -- ]]; then shift; fi
: "${SLURM_JOB_ID:?$usage (under sbatch)}"

runs_dir=${SCRATCH:-$HOME}
store=$runs_dir/ddstage-store-$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}
export DDSTAGE_STORE=$store
nodes=${SLURM_NNODES:-1}

# ---- Multi-node / libfabric -------------------------------------------------------------
# transport auto: shared memory for ranks on the reader's node, libfabric for the others
# (when ddstage was built with libfabric). fabric: every read through libfabric, even on
# this node. `ddstage info --fabric` (run below, on a compute node) shows the provider.
transport=${DDSTAGE_TRANSPORT:-auto}
# export DDSTAGE_FABRIC_PROVIDER=cxi        # default auto: cxi, verbs, efa, psm3, tcp, net, shm
# export DDSTAGE_FABRIC_DOMAIN=cxi0         # or hsn0 with tcp, mlx5_0 with verbs
# Slingshot, from the libfabric cxi manual (see ddstage-fabric(7)); untested here:
# export CXI_FORK_SAFE=1 CXI_FORK_SAFE_HP=1 # DataLoader workers fork after registering
# export FI_CXI_OPTIMIZED_MRS=0 FI_CXI_MR_MATCH_EVENTS=1   # stale keys cannot read
# InfiniBand: export RDMAV_FORK_SAFE=1, and servers need `ulimit -l unlimited`.
#
# With --network=job_vni each task sees SLINGSHOT_VNIS=<step VNI>,<job VNI>, and the cxi
# provider uses only the first: keep the last (the job's) in every ddstage process, servers
# and readers alike. A no-op when there is one VNI or none (not Slingshot).
# shellcheck disable=SC2016  # expanded by each task's shell, not here
on_job_vni='[[ ${SLINGSHOT_VNIS:-} == *,* ]] && export SLINGSHOT_VNIS=${SLINGSHOT_VNIS##*,}; exec "$@"'

# One task on every node of the job, for per-node housekeeping.
every_node() { srun --overlap -N "$nodes" --ntasks="$nodes" --ntasks-per-node=1 "$@"; }

# Waits up to $2 seconds for process $1 to end, then sends it SIGTERM; returns its status.
reap() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill "$pid" 2>/dev/null || true
  wait "$pid"
}

serve_pid='' train_pid=''
# The epilogue. Under scancel, the time limit or a requeue, Slurm is already ending the job's
# steps and refuses new ones: the per-node clean then fails and each rank's own SIGTERM exit
# (which frees its memory) is what remains; the local clean still runs here.
finish() {
  local status=$?
  # A second signal must not cut the epilogue short; `:` rather than '' so that the commands
  # below keep the default actions (an ignored signal is inherited).
  trap : TERM INT
  set +e
  [[ -n $train_pid ]] && kill "$train_pid" 2>/dev/null
  if [[ -n $serve_pid ]]; then
    ddstage stop --store "$store"
    reap "$serve_pid" 30 >/dev/null 2>&1
    every_node ddstage clean --store "$store" || ddstage clean --store "$store"
  fi
  rmdir "$store" 2>/dev/null
  exit "$status"
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Prologue. What an earlier run of this job left (requeued after a node failure, its epilogue
# never ran): dead stores' segments on every node, the killed run's store directory.
earlier=()
for dir in "$runs_dir/ddstage-store-$SLURM_JOB_ID".*; do
  [[ -d $dir && $dir != "$store" ]] && earlier+=("$dir")
done
# shellcheck disable=SC2016  # expanded by each task's shell
every_node bash -c 'ddstage clean && for d; do ddstage clean --store "$d"; done' clean "${earlier[@]}"
for dir in "${earlier[@]}"; do
  rmdir "$dir" 2>/dev/null || echo "slurm-job.sh: $dir kept: its store.yaml names a store not proven gone" >&2
done

if ((nodes > 1)); then
  srun --overlap -N 1 -n 1 ddstage info --fabric
fi
# The store: its own step, one rank per node, MPI through PMIx (only to start: see
# ddstage-serve(1)). --kill-on-bad-exit=0 --no-kill: a lost node or rank does not end the step,
# so the store serves on without it (`ddstage load --replicas 2` keeps every sample readable).
srun --overlap -N "$nodes" --ntasks="$nodes" --ntasks-per-node=1 --mpi="${SLURM_MPI_TYPE:-pmix}" \
  --kill-on-bad-exit=0 --no-kill \
  bash -c "$on_job_vni" job-vni ddstage serve --store "$store" --transport "$transport" &
serve_pid=$!
ddstage wait --store "$store" --timeout 120s --pid "$serve_pid"
ddstage load --store "$store" "$index" --name train --verify
ddstage status --store "$store"

# Training reads from the store instead of the parallel file system: a step with the job's
# task layout on the same nodes as the store (--overlap), on the job VNI. Run in the
# background so a SIGTERM reaches the trap at once rather than after the step ends.
if (($# == 0)); then
  # The test batch: the first field's first 128 samples (fewer if the dataset is smaller).
  info=$(ddstage info --json "$index")
  samples=$(sed -n 's/.*"samples":\([0-9]*\).*/\1/p' <<<"$info")
  field=$(sed -n 's/.*"fields":\[{"name":"\([^"]*\)".*/\1/p' <<<"$info")
  ids=0-$(((samples < 128 ? samples : 128) - 1))
  # shellcheck disable=SC2016  # expanded by each task's shell
  set -- bash -c 'set -o pipefail
    bytes=$(ddstage read --dataset train --ids "$1" --field "$2" --verify | wc -c) &&
      echo "task $SLURM_PROCID on $(hostname): samples $1 of $2 read and verified ($bytes bytes)"' \
    test-batch "$ids" "$field"
fi
srun --overlap bash -c "$on_job_vni" job-vni "$@" &
train_pid=$!
wait "$train_pid"
