#!/usr/bin/env bash
# Example Slurm batch script: stage a flattened dataset into node memory for the length of
# the job, train from it, and free the memory at the end, also when training fails.
#
#   sbatch -N 1 --ntasks-per-node=4 share/ddstage/slurm-job.sh /lustre/me/train.ddx
#
# Each store rank holds a byte-balanced share of the samples in shared memory; same-node
# readers (`ddstage read --store`, apps linking libcore's ddstage::Client) copy rows straight
# out of it. This release reads only from ranks on the reader's node: use one node until the
# libfabric transport lands. The index must be readable by every rank.
#SBATCH --time=01:00:00
set -euo pipefail

index=${1:?usage: slurm-job.sh DATASET.ddx}
# The store directory only holds store.yaml; put it where every job step can see it.
store=${DDSTAGE_STORE:-${SCRATCH:-$HOME}/ddstage-store-$SLURM_JOB_ID}

# Prologue: start the store as its own job step, wait until every rank is ready.
srun --overlap ddstage serve --store "$store" &
serve_pid=$!
for _ in $(seq 600); do
  [[ -f "$store/store.yaml" ]] && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "ddstage serve failed" >&2; exit 1; }
  sleep 0.1
done
[[ -f "$store/store.yaml" ]] || { echo "ddstage serve did not start in 60 s" >&2; exit 1; }

# Epilogue, whatever happens next: stop the store (it removes its shared memory) and reap it.
trap 'ddstage stop --store "$store" || true; wait "$serve_pid" || true' EXIT

ddstage load --store "$store" "$index" --name train --verify
ddstage status --store "$store"

# Training reads from the store instead of the parallel file system, e.g.:
ddstage read --store "$store" --dataset train --ids 0-127 --field x -o /dev/null --verify
# srun python train.py --store "$store" --dataset train
