#!/usr/bin/env bash
# A machine without the Debian packages of CLI11, yaml-cpp, spdlog, fmt, xxhash and Catch2 still
# builds ddstage (cmake/ddstage_fetch.cmake): scripts/build-asan configures and builds the ASan
# tree with those packages hidden (scripts/hide-dev-packages). This checks that tree: configure
# fetched all six (the unit tests, built there, link the fetched Catch2); the CLI loads one copy
# each of spdlog, fmt and yaml-cpp, the fetched shared ones, beside libddstage.so; it flattens
# and reads a small .npy; and the log level the CLI sets reaches libcore's own log lines (`-q`
# silences them).
#
# Exit 0 pass, 1 fail, 77 skipped (the tree was built with the system's packages).
# usage: test_fetch_fallback.sh BUILD_DIR FETCHED_LIBRARIES
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR FETCHED_LIBRARIES" >&2
  exit 2
fi
build=$1 fetched=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

for name in cli11 yaml-cpp spdlog fmt xxhash catch2; do
  [[ ";$fetched;" == *";$name;"* ]] ||
    { echo "SKIP: $build was configured with the system's $name (fetched: ${fetched:-none}); scripts/build-asan hides the packages as root, with unshare and the sources scripts/install-deps unpacks"; exit 77; }
done

ddstage=$build/cli/ddstage
libs=$(ldd "$ddstage" | grep -E '^\s*lib(spdlog|fmt|yaml-cpp)[.d]' || true)
for lib in libspdlog libfmt libyaml-cpp; do
  found=$(grep -c "^[[:space:]]*${lib}[.d]" <<<"$libs" || true)
  [[ $found -eq 1 ]] ||
    fail "ddstage loads $found shared $lib, not 1 (a static one is a copy in libddstage.so and another in the CLI):"$'\n'"$libs"
  grep "^[[:space:]]*${lib}[.d]" <<<"$libs" | grep -q "=> $build/" ||
    fail "ddstage does not load the fetched $lib:"$'\n'"$libs"
done

"$ddstage" --version | grep -q ddstage || fail "ddstage --version"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -c 'import numpy, sys; numpy.save(sys.argv[1], numpy.arange(12, dtype="<i4").reshape(3, 4))' \
  "$work/rows.npy"
"$ddstage" flatten "$work/rows.npy" -o "$work/rows.ddx" >/dev/null
"$ddstage" read "$work/rows.ddx" --ids 1 -o "$work/row.bin" >/dev/null
[[ $(od -An -t d4 "$work/row.bin" | xargs) == "4 5 6 7" ]] || fail "read gave $(od -An -t d4 "$work/row.bin")"

# A dead store on this host: `stop` finds rank 0 silent, and libcore logs a warning as it cleans
# up. Without -q it shows; with -q (level error, set by the CLI) it must not.
dead_store() {
  rm -rf "$work/store"
  mkdir -m 0700 "$work/store"
  (umask 077; cat >"$work/store/store.yaml") <<YAML
format_version: 1
token: 0123456789abcdef0123456789abcdef
id: "0123456789ab"
control: 127.0.0.1:1
ranks:
  - {rank: 0, host: $(hostname), pid: 999999999, transports: [copy], memory_limit: 0}
datasets: []
YAML
}
dead_store
loud=$(DDSTAGE_CONTROL_TIMEOUT=3s "$ddstage" stop --store "$work/store" 2>&1 >/dev/null) || fail "stop: $loud"
[[ $loud == *"does not answer"* ]] || fail "stop of a dead store logged no warning: $loud"
dead_store
quiet=$(DDSTAGE_CONTROL_TIMEOUT=3s "$ddstage" -q stop --store "$work/store" 2>&1) || fail "-q stop: $quiet"
[[ -z $quiet ]] || fail "-q did not silence libcore: $quiet"
echo "PASS: built with every library fetched; one spdlog, fmt and yaml-cpp; -q reaches libcore"
