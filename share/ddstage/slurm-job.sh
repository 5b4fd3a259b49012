#!/usr/bin/env bash
# Example Slurm batch script: stage a flattened dataset into node memory for the length of
# the job, train from it, and free the memory at the end, also when training fails.
#
#   sbatch -N 1 --ntasks-per-node=4 share/ddstage/slurm-job.sh /lustre/me/train.ddx
#   sbatch -N 8 --ntasks-per-node=4 --network=job_vni \
#          share/ddstage/slurm-job.sh /lustre/me/train.ddx python train.py --epochs 10
#
# Each store rank holds a byte-balanced share of the samples in shared memory; same-node
# readers (`ddstage read --store`, apps linking libcore's ddstage::Client) copy rows straight
# out of it, and rows held on other nodes are read over libfabric (see ddstage-fabric(7)).
# Everything after the index is the training command: it runs as its own job step on every
# task and finds the store directory in $DDSTAGE_STORE. Without one, every task reads a
# test batch instead. The index must be readable by every rank.
#SBATCH --time=01:00:00
# ---- Multi-node on HPE Slingshot (cxi) --------------------------------------------------
# Every job step gets its own VNI, and endpoints on different VNIs cannot talk: the store
# (one step) and training (another step) must share the job-wide VNI. Site-specific:
# uncomment what your site needs (some, e.g. Frontier, also need single_node_vni).
##SBATCH --network=job_vni
##SBATCH --network=job_vni,single_node_vni
set -euo pipefail

index=${1:?usage: slurm-job.sh DATASET.ddx [TRAINING COMMAND...]}
shift
# The store directory only holds store.yaml; put it where every job step can see it.
store=${DDSTAGE_STORE:-${SCRATCH:-$HOME}/ddstage-store-$SLURM_JOB_ID}
export DDSTAGE_STORE=$store

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
# One store rank per node on several nodes (one endpoint, one progress thread each); on
# one node, one rank per task as before.
serve_layout=()
if (( ${SLURM_NNODES:-1} > 1 )); then
  serve_layout=(-N "$SLURM_NNODES" --ntasks-per-node=1)
  srun -N 1 -n 1 --overlap ddstage info --fabric
fi

# Prologue: start the store as its own job step, wait until every rank is ready.
srun --overlap "${serve_layout[@]}" bash -c "$on_job_vni" job-vni \
  ddstage serve --store "$store" --transport "$transport" &
serve_pid=$!
for _ in $(seq 1200); do
  [[ -f "$store/store.yaml" ]] && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "ddstage serve failed" >&2; exit 1; }
  sleep 0.1
done
[[ -f "$store/store.yaml" ]] || { echo "ddstage serve did not start in 120 s" >&2; exit 1; }

# Epilogue, whatever happens next: stop the store (it removes its shared memory) and reap it.
trap 'ddstage stop --store "$store" || true; wait "$serve_pid" || true' EXIT

ddstage load --store "$store" "$index" --name train --verify
ddstage status --store "$store"

# Training reads from the store instead of the parallel file system: a step on the same
# nodes as the store (--overlap), on the job VNI.
if (( $# )); then
  srun --overlap bash -c "$on_job_vni" job-vni "$@"
else
  srun --overlap bash -c "$on_job_vni" job-vni \
    ddstage read --store "$store" --dataset train --ids 0-127 --field x -o /dev/null --verify
fi
