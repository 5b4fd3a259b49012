#!/usr/bin/env bash
# A CPU-only app builds against the installed ddstage with no MPI, libfabric, CUDA, yaml-cpp,
# spdlog, xxhash or fmt development files visible, both with find_package(ddstage) and with
# plain `c++ $(pkg-config --cflags --libs ddstage)`, and reads the bytes `ddstage read` does.
# Uses the prefix install.reader_app (test_install.sh) installed (its ctest fixture).
#
# The development files are hidden in a private mount namespace: an overlay on /usr from which
# they are deleted, and empty tmpfs over the CUDA toolkit. Runtime libraries (libmpi.so.40,
# libyaml-cpp.so.0.7, ...) stay: libddstage.so needs them at run time, as any shared library
# needs its own DT_NEEDED; the app itself must not name them.
#
# Exit 0 pass, 1 fail, 77 when it cannot run here (not root, no unshare/overlayfs, no
# pkg-config or readelf).
# usage: cpu_client.sh BUILD_DIR SOURCE_DIR CMAKE CXX_COMPILER DDSTAGE_GEN PYTHON
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR CMAKE CXX_COMPILER DDSTAGE_GEN PYTHON" >&2
  exit 2
fi
build=$1 source=$2 cmake=$3 cxx=$4 gen=$5 python=$6
prefix=$build/tests/install-test/prefix  # test_install.sh's
work=$build/tests/install-test/cpu-client
multiarch=/usr/lib/x86_64-linux-gnu

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
step() { printf '\n== %s\n' "$*"; }

# What a CPU-only app must do without: development files only (headers, pkg-config and CMake
# files, unversioned .so links, compiler wrappers).
hide_dev_files() {
  local scratch=$1
  mount -t tmpfs ddstage-hide "$scratch"
  mkdir "$scratch/upper" "$scratch/work"
  mount -t overlay ddstage-hide -o "lowerdir=/usr,upperdir=$scratch/upper,workdir=$scratch/work" /usr
  rm -rf $multiarch/openmpi/include $multiarch/openmpi/lib/pkgconfig /usr/include/rdma \
    /usr/include/{yaml-cpp,spdlog,fmt,xxhash.h,xxh3.h,xxh_x86dispatch.h} \
    $multiarch/cmake/{yaml-cpp,spdlog,fmt} /usr/bin/opal_wrapper /usr/bin/mpic{c,xx,++}
  rm -f $multiarch/pkgconfig/{mpi,ompi,orte,libfabric,yaml-cpp,spdlog,libxxhash,fmt}*.pc
  find $multiarch $multiarch/openmpi/lib -maxdepth 1 -type l \
    \( -name 'libmpi*.so' -o -name 'libopen-*.so' -o -name 'libfabric.so' -o -name 'libyaml-cpp.so' \
    -o -name 'libspdlog.so' -o -name 'libxxhash.so' -o -name 'libfmt.so' \) -delete
  rm -f $multiarch/libfabric.a
  # The CUDA toolkit: thousands of files, covered rather than deleted one by one.
  local cuda
  for cuda in /usr/local/cuda*; do
    [[ -d $cuda && ! -L $cuda ]] && mount -t tmpfs -o ro ddstage-hide "$cuda"
  done
  # Hidden for real, or the test proves nothing.
  [[ ! -e $multiarch/openmpi/include/mpi.h ]] || fail "mpi.h still visible"
  [[ ! -e /usr/include/rdma/fabric.h ]] || fail "fabric.h still visible"
  [[ ! -e /usr/include/yaml-cpp && ! -e /usr/include/spdlog ]] || fail "yaml-cpp/spdlog headers still visible"
  ! command -v mpicxx >/dev/null || fail "mpicxx still runs"
  ! nvcc --version >/dev/null 2>&1 || fail "nvcc still runs"
  ! compgen -G "/usr/local/cuda*/include/cuda_runtime.h" >/dev/null || fail "CUDA headers still visible"
  local pc
  for pc in libfabric ompi-cxx mpi yaml-cpp spdlog libxxhash; do
    ! pkg-config --exists $pc || fail "pkg-config still finds $pc"
  done
}

# The app's own DT_NEEDED: libddstage, and none of what libddstage uses inside.
check_needed() {
  local needed
  needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  grep -q '^libddstage\.so' <<<"$needed" || fail "$1 does not link libddstage: $needed"
  ! grep -E 'libmpi|libfabric|libcudart|libyaml-cpp|libspdlog|libxxhash' <<<"$needed" ||
    fail "$1 links libcore's own dependencies itself"
}

# Which libddstage the loader gives binary: the prefix's, not one installed system-wide.
check_loads_prefix_lib() {
  local lib
  lib=$(ldd "$1" | sed -n 's/^\s*libddstage\.so[^ ]* => \(\S*\).*/\1/p')
  [[ $lib == "$prefix"/* ]] || fail "$1 loads libddstage from '${lib:-nowhere}', not from $prefix"
}

# Second half: inside the namespace.
if [[ ${DDSTAGE_CPU_CLIENT_INSIDE:-} == 1 ]]; then
  hide_dev_files "$work/hide"

  step "find_package(ddstage) with the development files hidden"
  "$cmake" -S "$source/examples/cpu-client" -B "$work/build-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log"; fail "the app does not configure"; }
  "$cmake" --build "$work/build-cmake" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; fail "the app does not build"; }

  step "c++ \$(pkg-config --cflags --libs ddstage)"
  export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name ddstage.pc | head -1)")
  flags=$(pkg-config --cflags --libs ddstage) || fail "pkg-config --cflags --libs ddstage failed"
  echo "$flags"
  # shellcheck disable=SC2086  # the flags are words
  "$cxx" -std=c++20 -O1 "$source/examples/cpu-client/main.cpp" $flags \
    -Wl,-rpath,"$(pkg-config --variable=libdir ddstage)" -o "$work/cpu-client-pc"

  step "both apps read what ddstage read does"
  for app in "$work/build-cmake/cpu-client" "$work/cpu-client-pc"; do
    check_needed "$app"
    check_loads_prefix_lib "$app"
    "$app" "$work/rows.ddx" 10 40 x >"$work/got.bin"
    cmp "$work/expected.bin" "$work/got.bin" || fail "$app read other bytes than ddstage read"
  done
  exit 0
fi

[[ $EUID -eq 0 ]] || skip "hiding development files needs root (a private mount namespace)"
for tool in unshare pkg-config readelf; do
  command -v $tool >/dev/null || skip "no $tool"
done
[[ -x $prefix/bin/ddstage ]] || fail "no installed ddstage in $prefix: install.reader_app installs it"
rm -rf "$work"
mkdir -p "$work/hide"
# Whatever the caller's environment says, the installed binaries find libddstage themselves.
unset LD_LIBRARY_PATH PYTHONPATH
for v in $(env | sed -n 's/^\(DDSTAGE_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done

step "the installed ddstage runs and reads from origin (RUNPATH \$ORIGIN)"
readelf -d "$prefix/bin/ddstage" | grep -q 'R.*PATH.*\$ORIGIN/' || fail "installed ddstage has no \$ORIGIN RUNPATH"
check_loads_prefix_lib "$prefix/bin/ddstage"
timeout 60 "$gen" hdf5-rows "$work/rows.h5" --samples 60 --shape 96 --dtype float32
timeout 60 "$prefix/bin/ddstage" flatten "$work/rows.h5" --field x=/features --field y=/labels -o "$work/rows.ddx" >"$work/flatten.log"
timeout 60 "$prefix/bin/ddstage" read "$work/rows.ddx" --ids 10-49 --field x -o "$work/expected.bin"
[[ $(stat -c %s "$work/expected.bin") -eq $((40 * 96 * 4)) ]] || fail "ddstage read wrote $(stat -c %s "$work/expected.bin") bytes"

module=$(find "$prefix" -name '_ddstage*.so' | head -1)
if [[ -n $module && -x $python ]]; then
  step "the installed Python module imports"
  PYTHONPATH=$(dirname "$(dirname "$module")") timeout 60 "$python" -c \
    'import ddstage, sys; sys.exit(0 if ddstage.__file__.startswith(sys.argv[1]) else 1)' "$prefix" ||
    fail "the installed Python module does not import from $prefix"
fi

if ! unshare -m --propagation private true 2>/dev/null; then
  skip "unshare -m is not permitted here"
fi
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || skip "no overlayfs"
DDSTAGE_CPU_CLIENT_INSIDE=1 unshare -m --propagation private bash "$0" "$@"
echo PASS
