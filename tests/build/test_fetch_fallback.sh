#!/usr/bin/env bash
# A machine without the Debian packages of CLI11, yaml-cpp, spdlog, fmt, xxhash and Catch2 still
# builds ddstage (cmake/ddstage_fetch.cmake): in a private mount namespace the packages' headers,
# CMake packages, .pc files and static libraries are hidden, and the project is configured
# with FETCHCONTENT_SOURCE_DIR_* at local sources of the pinned releases (scripts/install-deps
# unpacks them) and no network. Configure must report each library fetched and resolve every
# target, among them Catch2's; the `ddstage` CLI built against the fetched libraries must
# flatten and read a small .npy.
#
# Exit 0 pass, 1 fail, 77 skipped (not root, no unshare, no local sources).
# usage: test_fetch_fallback.sh SOURCE_DIR WORK_DIR CMAKE
set -euo pipefail

if [[ ${1-} == --hidden ]]; then
  shift
  hidden=1
fi
if [[ $# -ne 3 ]]; then
  echo "usage: $0 SOURCE_DIR WORK_DIR CMAKE" >&2
  exit 2
fi
source=$1 work=$2 cmake=$3

deps_src=${DDSTAGE_DEPS_SRC:-/var/cache/ddstage/deps-src}
packages=(libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libxxhash-dev catch2)
# Debian source package (the directory under $deps_src) -> FetchContent name in upper case.
declare -A content=([cli11]=CLI11 [yaml-cpp]=YAML_CPP [spdlog]=SPDLOG [fmtlib]=FMT [xxhash]=XXHASH
                    [catch2]=CATCH2)

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

if [[ -z ${hidden-} ]]; then
  [[ $(id -u) -eq 0 ]] || skip "hiding the system's packages takes a mount namespace: run as root"
  command -v unshare >/dev/null || skip "no unshare (util-linux)"
  for s in "${!content[@]}"; do
    [[ -d $deps_src/$s ]] ||
      skip "no local sources in $deps_src/$s: run scripts/install-deps as root with a Debian archive reachable"
  done
  exec unshare --mount --propagation private bash "$0" --hidden "$@"
fi

# What the packages install, less the directories other packages share: an empty tmpfs over
# their own directories, /dev/null over their files. Symbolic links (the .so dev links) are
# left: a mount over one lands on its target, the runtime library, and without the headers
# nothing can use them anyway.
installed=()
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    installed+=("$p")
  fi
done
if ((${#installed[@]} > 0)); then
  mapfile -t paths < <(dpkg-query -L "${installed[@]}" | sort -u)
  dirs=()
  for path in "${paths[@]}"; do
    [[ -d $path && ! -L $path ]] && dirs+=("$path")
  done
  # "pkg[:arch]: dir" for a directory of one package; shared ones list several, comma-separated.
  declare -A own=()
  while read -r line; do
    [[ $line != *,* ]] && own[${line#*: }]=1
  done < <(dpkg-query -S "${dirs[@]}" 2>/dev/null)
  covered=
  for path in "${paths[@]}"; do
    if [[ -n $covered && $path == "$covered"/* ]] || [[ -L $path ]]; then
      continue
    elif [[ -d $path && -n ${own[$path]-} ]]; then
      mount -t tmpfs none "$path"
      covered=$path
    elif [[ -f $path ]]; then
      mount --bind /dev/null "$path"
    fi
  done
fi
# The hiding must hold, or a broken fallback would pass on the system's copies.
for f in /usr/include/CLI/CLI.hpp /usr/include/yaml-cpp/yaml.h /usr/include/spdlog/spdlog.h \
         /usr/include/fmt/format.h /usr/include/catch2/catch.hpp; do
  [[ ! -e $f ]] || fail "$f is still visible"
done
[[ ! -s /usr/include/xxhash.h ]] || fail "/usr/include/xxhash.h is still visible"

rm -rf "$work"
mkdir -p "$work"
sources=()
for s in "${!content[@]}"; do
  sources+=("-DFETCHCONTENT_SOURCE_DIR_${content[$s]}=$deps_src/$s")
done
# The least build that uses every fetched library: -O0 (build type None), no MPI, fabric, GPU
# or Python. HDF5 stays: tests/tools links ddstage-gen to it unconditionally. Compiling the CLI
# is ~350 s of CPU; ccache, where there is one, makes a second run cost a tenth of that, and a
# broken fallback still compiles afresh (other include paths and headers, other cache keys).
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
"$cmake" -S "$source" -B "$work/build" -DCMAKE_BUILD_TYPE=None -DDDSTAGE_SHARED=ON "${launcher[@]}" \
  -DDDSTAGE_WITH_MPI=OFF -DDDSTAGE_WITH_FABRIC=OFF -DDDSTAGE_WITH_CUDA=OFF \
  -DDDSTAGE_WITH_HIP=OFF -DDDSTAGE_WITH_PYTHON=OFF -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  "${sources[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
for name in cli11 yaml-cpp spdlog fmt xxhash catch2; do
  grep -q "ddstage: fetched $name " "$work/configure.log" ||
    { cat "$work/configure.log"; fail "the configure log does not say $name was fetched"; }
done

"$cmake" --build "$work/build" -j2 --target ddstage Catch2WithMain >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; fail "build"; }
ddstage=$work/build/cli/ddstage

"$ddstage" --version | grep -q ddstage || fail "ddstage --version"
/usr/bin/python3 -c 'import numpy, sys; numpy.save(sys.argv[1], numpy.arange(12, dtype="<i4").reshape(3, 4))' \
  "$work/rows.npy"
"$ddstage" flatten "$work/rows.npy" -o "$work/rows.ddx" >/dev/null
"$ddstage" read "$work/rows.ddx" --ids 1 -o "$work/row.bin" >/dev/null
[[ $(od -An -t d4 "$work/row.bin" | xargs) == "4 5 6 7" ]] || fail "read gave $(od -An -t d4 "$work/row.bin")"
echo "PASS: configured, built and ran with every library fetched"
