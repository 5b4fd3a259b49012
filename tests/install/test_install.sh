#!/usr/bin/env bash
# An installed ddstage can be used from a separate CMake project: install this build into a
# scratch prefix, build examples/reader-app against it with find_package(ddstage), start a
# 1-rank store from the installed binary, load a dataset and read it through the app.
# Leaves no server process and no /dev/shm segment behind, whatever happens.
#
# Exit 0 pass, 1 fail, 77 when the build has no MPI (install and app build checked; no store).
# usage: test_install.sh DDSTAGE DDSTAGE_GEN BUILD_DIR SOURCE_DIR CMAKE CXX_COMPILER
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 DDSTAGE DDSTAGE_GEN BUILD_DIR SOURCE_DIR CMAKE CXX_COMPILER" >&2
  exit 2
fi
ddstage_built=$1 gen=$2 build=$3 source=$4 cmake=$5 cxx=$6

work=$build/tests/install-test         # everything this test writes, inside the build dir
prefix=$work/prefix
store=$work/store
serve_pid=
store_id=

# A plain `ddstage serve` is one MPI singleton rank; as root OpenMPI wants these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
# The user's own settings and config file stay out of it.
for v in $(env | sed -n 's/^\(DDSTAGE_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export XDG_CONFIG_HOME=$work/xdg HOME=$work/home

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

alive() {  # running and not a zombie
  [[ -r /proc/$1/stat ]] || return 1
  local state
  state=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat")
  [[ $state != Z && $state != X ]]
}

segments() {
  [[ -n $store_id ]] || return 0
  compgen -G "/dev/shm/ddstage-${store_id}-*" || true
}

cleanup() {
  local rc=$?
  trap - EXIT
  if [[ -n $serve_pid ]] && alive "$serve_pid"; then
    echo "cleanup: stopping the server (pid $serve_pid)" >&2
    timeout 20 "$prefix/bin/ddstage" stop --store "$store" >/dev/null 2>&1 || true
    for _ in $(seq 100); do alive "$serve_pid" || break; sleep 0.1; done
    # serve runs in its own session: its process group holds everything it started.
    kill -KILL -- "-$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
    rc=1
  fi
  local left=()
  mapfile -t left < <(segments)
  if [[ ${#left[@]} -gt 0 ]]; then
    echo "FAIL: shared memory left behind: ${left[*]}" >&2
    rm -f "${left[@]}"
    rc=1
  fi
  if [[ $rc -ne 0 && -f $work/serve.log ]]; then
    echo "--- serve log" >&2
    cat "$work/serve.log" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT

rm -rf "$work"
mkdir -p "$work/xdg" "$work/home"

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/ddstage include/ddstage/ddstage.hpp include/ddstage/client.hpp include/ddstage/config.hpp; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
# Tool plumbing (the server, shard loading, ...) is not part of the installed API.
[[ ! -e $prefix/include/ddstage/tool ]] || fail "ddstage/tool/ was installed: $(ls "$prefix/include/ddstage/tool")"
# Apps come in through the front door: the example is what they copy.
others=$(grep -o '#include <ddstage/[^>]*>' "$source/examples/reader-app/main.cpp" | grep -v '<ddstage/ddstage.hpp>' || true)
[[ -z $others ]] || fail "examples/reader-app includes more than <ddstage/ddstage.hpp>: $others"
# lib/ or lib/<multiarch>/, as GNUInstallDirs chose at configure time.
config=$(find "$prefix" -name ddstageConfig.cmake -path '*/cmake/ddstage/*' | head -1)
[[ -n $config ]] || fail "no ddstageConfig.cmake under $prefix"
package_dir=$(dirname "$config")
for f in ddstageConfigVersion.cmake ddstageTargets.cmake; do
  [[ -e $package_dir/$f ]] || fail "not installed: $package_dir/$f"
done
[[ -n $(find "$prefix" -name 'libddstage.*') ]] || fail "libddstage not installed"

step "build examples/reader-app against the prefix"
timeout 300 "$cmake" -S "$source/examples/reader-app" -B "$work/build-app" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
timeout 300 "$cmake" --build "$work/build-app"
app=$work/build-app/reader-app
found=$(sed -n 's/^ddstage_DIR:PATH=//p' "$work/build-app/CMakeCache.txt")
[[ $found -ef $package_dir ]] || fail "find_package(ddstage) found $found, not the scratch prefix"

step "usage errors exit 2"
set +e
"$app" >/dev/null 2>"$work/usage.err"; rc=$?
set -e
[[ $rc -eq 2 ]] || fail "reader-app with no flags exited $rc, not 2"
grep -q '^reader-app: error: ' "$work/usage.err" || fail "no error line: $(cat "$work/usage.err")"

if ! grep -q '^#define DDSTAGE_HAVE_MPI 1' "$prefix/include/ddstage/config.hpp"; then
  # The app built and linked against the package; serving needs MPI (ctest: SKIP_RETURN_CODE).
  echo "SKIPPED the live-store part: this ddstage was built without MPI, so it cannot serve"
  exit 77
fi

step "flatten two small datasets with the built tools"
timeout 120 "$gen" hdf5-rows "$work/rows.h5" --samples 300 --shape 768 --dtype float32
timeout 120 "$ddstage_built" flatten "$work/rows.h5" --field x=/features --field y=/labels -o "$work/rows.ddx"
timeout 120 "$gen" files "$work/tree" --samples 200 --min-bytes 1 --max-bytes 9000
timeout 120 "$ddstage_built" flatten "$work/tree" -o "$work/files.ddx"

step "serve (1 rank, installed binary)"
mkdir -p -m 700 "$store"   # serve refuses a store directory others could write
setsid "$prefix/bin/ddstage" serve --store "$store" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
serve_pid=$!
# wait, not a store.yaml: a dead store's leftover descriptor would pass for a live one.
timeout 90 "$prefix/bin/ddstage" wait --store "$store" --timeout 60s --pid "$serve_pid" ||
  fail "serve not ready within 60 s (see $work/serve.log)"
store_id=$(sed -n 's/^id: *//p' "$store/store.yaml" | tr -d "\"' ")
[[ ${#store_id} -ge 8 ]] || fail "no store id in store.yaml"

step "load"
timeout 120 "$prefix/bin/ddstage" load --store "$store" "$work/rows.ddx" --name rows --verify
timeout 120 "$prefix/bin/ddstage" load --store "$store" "$work/files.ddx" --name files
[[ -n $(segments) ]] || fail "no /dev/shm/ddstage-${store_id}-* segment after load: the leak check would see nothing"

step "read through the installed-against app"
timeout 120 "$app" --store "$store" --dataset rows --field x --batch 64 --batches 5 | tee "$work/app-rows.out"
grep -q "^read 320 rows, 983040 bytes of 'x' from 'rows', verified: " "$work/app-rows.out" \
  || fail "unexpected output for rows"
timeout 120 "$app" --store "$store" --dataset files --batch 32 --batches 4 | tee "$work/app-files.out"
grep -q "^read 128 rows, [0-9]* bytes of '.*' from 'files', verified: " "$work/app-files.out" \
  || fail "unexpected output for files"

step "an unknown dataset is a one-line usage error"
set +e
timeout 120 "$app" --store "$store" --dataset nope --field x >/dev/null 2>"$work/nope.err"; rc=$?
set -e
[[ $rc -eq 2 ]] || fail "unknown dataset exited $rc, not 2: $(cat "$work/nope.err")"
[[ $(grep -c '^reader-app: error: ' "$work/nope.err") -eq 1 ]] || fail "not one error line: $(cat "$work/nope.err")"
grep -q nope "$work/nope.err" || fail "the error does not name the dataset"

step "stop"
timeout 60 "$prefix/bin/ddstage" stop --store "$store"
for _ in $(seq 300); do alive "$serve_pid" || break; sleep 0.1; done
alive "$serve_pid" && fail "serve still running 30 s after stop"
set +e
wait "$serve_pid"; rc=$?
set -e
[[ $rc -eq 0 ]] || fail "serve exited $rc"
serve_pid=
[[ ! -e $store/store.yaml ]] || fail "store.yaml left behind"
[[ -z $(segments) ]] || fail "segments left behind after stop"
echo "PASS"
