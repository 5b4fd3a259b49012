#!/usr/bin/env bash
# On a machine with a GPU (written for one NVIDIA H200, 16 cores, no network): builds ddstage
# with CUDA in build-cuda, runs the GPU tests (label hardware), the GPU CLI test, the client
# unit tests and the Python GPU tests in that build, then the GPU bench (µs/row host vs direct vs staged at 3 KB, 12.5 KB,
# 200 KB and 1 MB rows, batch 128, with the per-batch sync from the read profile). Prints
# everything; exits non-zero if a build or test failed. Needs the Debian packages of
# scripts/install-deps and the CUDA toolkit (nvcc on PATH or in /usr/local/cuda/bin).
# Usage: tests/gpu/run-on-device.sh [WORK_DIR]   (default BUILD/gpu-run)
# DDSTAGE_BUILD_DIR=DIR builds there instead of build-cuda (incrementally, if it exists).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="${DDSTAGE_BUILD_DIR:-$root/build-cuda}"
work="${1:-$build/gpu-run}"
jobs=$(nproc)
export PATH="$PATH:/usr/local/cuda/bin"
status=0
section() { printf '\n==== %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@" || { echo "FAILED ($?): $*"; status=1; }; }

section "machine"
date -u; uname -a; nproc; nvidia-smi -L 2>&1 || echo "nvidia-smi: not found"; nvcc --version 2>&1 | tail -2

section "build with CUDA ($build)"
# The runtime is called from C++ (no kernels), so no CUDA architecture is needed.
run cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDDSTAGE_WITH_CUDA=ON -DDDSTAGE_WITH_HIP=OFF \
  -DPython3_EXECUTABLE=/usr/bin/python3
run cmake --build "$build" -j "$jobs"
ddstage="$build/cli/ddstage"
gen="$build/tests/tools/ddstage-gen"
[[ -x "$ddstage" ]] || { echo "no ddstage binary: stopping"; exit 1; }

section "ddstage info --gpu"
run "$ddstage" info --gpu

section "GPU tests (ctest -L hardware), GPU CLI test, client and GPU unit tests"
run ctest --test-dir "$build" --output-on-failure -V -L hardware --timeout 600
run ctest --test-dir "$build" --output-on-failure -R 'cli.test_gpu|client|gpu|GPU' -j 4 --timeout 600

section "Python GPU tests: get_batch(out=device array), skip reasons shown"
run env PYTHONPATH="$build/python" DDSTAGE_BIN="$ddstage" DDSTAGE_GEN="$gen" \
  /usr/bin/python3 -m pytest -v -rs -p no:cacheprovider "$root/tests/python/test_gpu_python.py"

section "GPU bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
store="$work/store"
rm -f "$store/store.yaml"
"$ddstage" serve --store "$store" --listen 127.0.0.1:0 > "$work/serve.log" 2>&1 &
serve_pid=$!
trap '"$ddstage" stop --store "$store" >/dev/null 2>&1; kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null' EXIT
for _ in $(seq 600); do
  [[ -f "$store/store.yaml" ]] && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log"; echo "serve failed"; exit 1; }
  sleep 0.1
done
# name float32-count samples: 3 KB, 12.5 KB, 200 KB, 1 MB rows, ~12-512 MB each.
for spec in "r3k 768 4096" "r12k 3200 2048" "r200k 51200 1024" "r1m 262144 512"; do
  read -r name floats samples <<< "$spec"
  "$gen" hdf5-rows "$work/$name.h5" --samples "$samples" --shape "$floats" --dtype float32 &&
    "$ddstage" flatten "$work/$name.h5" --field x=/features --field y=/labels -o "$work/$name.ddx" --force -q &&
    "$ddstage" load --store "$store" "$work/$name.ddx" --name "$name" -q ||
    { echo "FAILED: preparing $name"; status=1; continue; }
  run "$build/tests/ddstage_gpu_bench" "$store" "$name" x 128 100
done
# The bench engine's GPU matrix, once `bench store` has it.
if "$ddstage" bench store --help 2>&1 | grep -q -- "--gpu-path"; then
  run "$ddstage" bench store --store "$store" --dataset r12k --dest host,gpu --gpu-path direct,staged
fi
"$ddstage" stop --store "$store"
wait "$serve_pid"
trap - EXIT

section "done: $([[ $status == 0 ]] && echo OK || echo 'FAILURES above')"
exit "$status"
