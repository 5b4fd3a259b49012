#!/usr/bin/env bash
# Regenerates the seed corpus (corpus/<target>/) from real files: indexes flattened by the real
# `ddstage flatten` from `ddstage-gen` data, npy files written by numpy, the store.yaml of a real
# 2-rank store, control frames as `ddstage` sends them, the example config. Run by hand, from a
# build, and commit what changed (keep the corpus under 1 MB):
#   tests/fuzz/make_seeds.sh build-asan/cli/ddstage build-asan/tests/tools/ddstage-gen
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 DDSTAGE DDSTAGE_GEN" >&2
  exit 2
fi
ddstage=$(realpath "$1") gen=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus
work=$(mktemp -d)
serve_pid=
cleanup() {
  if [[ -n $serve_pid ]] && kill -0 "$serve_pid" 2>/dev/null; then
    "$ddstage" stop --store "$work/store" >/dev/null 2>&1 || kill -KILL -- "-$serve_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
export XDG_CONFIG_HOME=$work/xdg  # the user's own config stays out of it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1

# Generated seeds are rewritten; inputs the fuzzers found (found-*, crash-*) stay.
for t in index_bin manifest npy_header zip_directory tar_reader store_yaml control_frame id_spec config settings \
    cluster_message; do
  mkdir -p "$corpus/$t"
  find "$corpus/$t" -type f ! -name 'found-*' ! -name 'crash-*' -delete
done

# index.bin and manifest.yaml from each source kind. npy3x4 has the shape fuzz_manifest's
# index.bin has (3 samples of uint8[4]), so its manifest passes the whole open.
"$gen" npy --samples 3 --shape 4 --dtype uint8 "$work/npy3x4.npy"
"$gen" npy --samples 5 --shape 2,3 --dtype float32 "$work/npy5.npy"
"$gen" files --samples 4 --min-bytes 8 --max-bytes 64 "$work/files"
"$gen" hdf5-rows --samples 4 --shape 2 "$work/rows.h5"
"$gen" hdf5-groups --samples 3 "$work/groups.h5"
flatten() { "$ddstage" flatten "$@" >/dev/null; }
flatten "$work/npy3x4.npy" -o "$work/npy3x4.ddx"
flatten "$work/npy5.npy" -o "$work/npy5.ddx"
flatten "$work/files" -o "$work/files.ddx" --pack
flatten "$work/rows.h5" -o "$work/rows.ddx" --field x=/features --field y=/labels
flatten "$work/groups.h5" -o "$work/groups.ddx" --groups '/samples/*'
for name in npy3x4 npy5 files rows groups; do
  cp "$work/$name.ddx/index.bin" "$corpus/index_bin/$name"
  cp "$work/$name.ddx/manifest.yaml" "$corpus/manifest/$name"
done

# npy headers as numpy writes them (all three format versions), and as ddstage-gen does.
head -c 256 "$work/npy5.npy" >"$corpus/npy_header/gen_float32"
/usr/bin/python3 - "$corpus/npy_header" <<'PY'
import io, sys
import numpy as np
out = sys.argv[1]
arrays = {
    "v1_uint8": (np.arange(12, dtype=np.uint8).reshape(3, 4), (1, 0)),
    "v1_scalar": (np.array(7, dtype=np.int64), (1, 0)),
    "v1_bool_fortran": (np.asfortranarray(np.zeros((2, 3), dtype=bool)), (1, 0)),
    "v2_float64": (np.zeros((2, 2, 2)), (2, 0)),
    "v3_int16": (np.zeros(5, dtype="<i2"), (3, 0)),
    "v1_bigendian": (np.zeros(2, dtype=">u4"), (1, 0)),
    "v1_record": (np.zeros(2, dtype=np.dtype([("a", "<i4"), ("b", ">f4", (3,)), ("s", "S8")],
                                             align=True)), (1, 0)),
    "v1_unicode": (np.zeros(2, dtype="<U5"), (1, 0)),
    "v1_complex": (np.zeros(2, dtype=">c16"), (1, 0)),
}
for name, (a, version) in arrays.items():
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=version, allow_pickle=False)
    open(f"{out}/{name}", "wb").write(buf.getvalue()[:256])
PY

# .npz archives as numpy writes them: stored, deflated, and with zip64 end records (what numpy
# writes past 4 GiB, made small by lowering zipfile's limit while writing); two archives
# concatenated (offsets shifted by the first); a deflated member whose header length (0) ends
# inside the preamble.
/usr/bin/python3 - "$corpus/zip_directory" <<'PY'
import sys, zipfile
import numpy as np
out = sys.argv[1]
arrays = {"x": np.arange(6, dtype="<f4").reshape(3, 2), "y": np.array([1, 2, 3], dtype=">i2")}
np.savez(f"{out}/stored", **arrays)
np.savez_compressed(f"{out}/deflated", **arrays)
with zipfile.ZipFile(f"{out}/short_header.npz", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("x.npy", b"\x93NUMPY\x01\x00\x00\x00" + b"A" * 200)
zipfile.ZIP64_LIMIT = 0
np.savez(f"{out}/zip64", **arrays)
with open(f"{out}/concatenated.npz", "wb") as f:
    f.write(open(f"{out}/deflated.npz", "rb").read() + open(f"{out}/zip64.npz", "rb").read())
PY
for f in "$corpus"/zip_directory/*.npz; do mv "$f" "${f%.npz}"; done
# tar archives as Python's tarfile writes them: ustar (a prefix name), GNU (an 'L' long name),
# pax (path=, size=, a global header), links and a directory; cut after the end-of-archive
# block (tarfile pads to 10 KB).
/usr/bin/python3 - "$corpus/tar_reader" <<'PY'
import io, sys, tarfile
out = sys.argv[1]
long = "deep/" * 24 + "name.jpg"
def archive(fmt, pax=None, **extra):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=pax) as t:
        for name, data in (("000001.jpg", b"\xff\xd8jpeg"), ("000001.cls", b"7"), (long, b""),
                           *extra.get("more", [])):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.pax_headers = extra.get("member_pax", {}) if data == b"7" else {}
            t.addfile(ti, io.BytesIO(data))
        for name, kind in (("adir", tarfile.DIRTYPE), ("alink", tarfile.SYMTYPE)):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = kind, "000001.cls"
            t.addfile(ti)
        end = t.offset
    return buf.getvalue()[:end + 1024]
seeds = {
    "ustar": archive(tarfile.USTAR_FORMAT),
    "gnu": archive(tarfile.GNU_FORMAT),
    "pax": archive(tarfile.PAX_FORMAT, pax={"comment": "global"}, member_pax={"size": "1"}),
    # Many global keys before several members (issue 28: this was quadratic), one cancelled by a
    # member's own empty record.
    "pax-global-keys": archive(tarfile.PAX_FORMAT, pax={f"x.k{i:03d}": "v" for i in range(200)},
                               member_pax={"x.k000": ""}, more=[(f"m{i}", b"x") for i in range(8)]),
}
for name, data in seeds.items():
    open(f"{out}/{name}", "wb").write(data)
PY

# store.yaml of a real 2-rank store with a dataset loaded.
mkdir -m 0700 "$work/store"
setsid mpiexec -n 2 "$ddstage" serve --store "$work/store" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 600); do
  [[ -e $work/store/store.yaml ]] && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
cp "$work/store/store.yaml" "$corpus/store_yaml/empty"
"$ddstage" load --store "$work/store" "$work/npy5.ddx" >/dev/null
cp "$work/store/store.yaml" "$corpus/store_yaml/loaded"
"$ddstage" stop --store "$work/store" >/dev/null
wait "$serve_pid" || true
serve_pid=

# Control-plane messages as cluster_wire.cpp writes them (op, from, subject, seq, answered, dead
# nodes, dead ranks, a command's time left), for the 40-node layout fuzz_cluster_message.cpp uses.
/usr/bin/python3 - "$corpus/cluster_message" <<'PY'
import struct, sys
from pathlib import Path

def message(op, frm, subject=-1, seq=0, answered=0, nodes=(), ranks=(), time_left_ns=0):
    out = struct.pack("<Biiqq", op, frm, subject, seq, answered)
    for items in (nodes, ranks):
        out += struct.pack("<Q", len(items)) + b"".join(struct.pack("<i", i) for i in items)
    return out + struct.pack("<q", time_left_ns)

seeds = {"keepalive": message(0, 1, seq=3), "suspect": message(1, 1, 17, seq=2),
         "rank_exited": message(2, 2, 9), "probe_request": message(3, 0, 5, seq=7),
         "ping": message(4, 0, 5, seq=7), "ack": message(5, 5, 5, seq=7),
         "probe_ack": message(6, 3, 5, seq=7), "view": message(7, 0, seq=4, nodes=(5, 17), ranks=(9,)),
         "command": message(8, 0, seq=1, time_left_ns=3_750_000_000),
         "reply": message(9, 1, seq=1, answered=60, ranks=(9, 20, 21))}
for name, data in seeds.items():
    Path(sys.argv[1], name).write_bytes(data)
PY

# Control frames as ddstage's client sends them (control_frame.hpp): magic, version 2, the
# token fuzz_control_frame.cpp expects, the body length, then the YAML map.
/usr/bin/python3 - "$corpus/control_frame" <<'PY'
import struct, sys
out = sys.argv[1]
token = b"0123456789abcdef0123456789abcdef"
def frame(text, tok=token):
    data = text.encode()
    return b"DDSC" + struct.pack("<I", 2) + tok + struct.pack("<I", len(data)) + data
requests = {
    "status": "op: status",
    "stop": "op: stop",
    "load": "op: load\nindex: /data/x.ddx\nname: x\nverify: false\nreplace: false\n"
            "allow_stale: false\nmem_limit: 0\nprogress: true",
    "unload": "op: unload\nname: x",
}
for name, text in requests.items():
    open(f"{out}/{name}", "wb").write(frame(text))
open(f"{out}/two_frames", "wb").write(frame(requests["status"]) + frame(requests["stop"]))
open(f"{out}/wrong_token", "wb").write(frame(requests["status"], b"f" * 32))
PY

# --ids: first byte = bit 7 for @FILE, bits 0-6 the dataset size / 32 (see fuzz_id_spec.cpp).
printf '\x20%s' '0,7,10-19' >"$corpus/id_spec/inline"
printf '\x7f%s' ' 3 - 4 ,4000,5,5' >"$corpus/id_spec/spaces"
printf '\xa0%s' $'# batch\n4\n\n2-3\n4\n' >"$corpus/id_spec/file"
printf '\x81%s' $'0-31\r\n7\n' >"$corpus/id_spec/file_crlf"

# The config file: the shipped example, and a flat one with every kind of value.
cp "$here/../../share/ddstage/config.yaml" "$corpus/config/example"
cat >"$corpus/config/kinds" <<'YAML'
log:
  level: warn
threads: 4
flatten: {pack_size: 12.5K, memory: 1G}
origin.allow_stale: yes
read_timeout: 500ms
transport: shm
profile: /tmp/p-%p-%h
YAML

# Setting values as fuzz_settings reads them with FuzzedDataProvider: the picks (setting number,
# then flag-or-env) come from the end of the input, the values from the front, each ended by a
# backslash and one more byte.
/usr/bin/python3 - "$corpus/settings" <<'PY'
import sys
out = sys.argv[1]
keys = ["log.level", "progress", "threads", "flatten.pack_size", "flatten.memory", "origin.allow_stale",
        "fabric.provider", "fabric.domain", "fabric.window", "fabric.inflight_bytes", "transport",
        "read_timeout", "gpu.path", "profile"]
def seed(picks):
    front, back = b"", b""
    for key, from_env, value in picks:
        front += value.encode() + b"\\ "
        back = bytes([int(from_env), keys.index(key)]) + back
    return front + back
seeds = {
    "sizes": [("flatten.pack_size", True, "256M"), ("fabric.inflight_bytes", False, "12.5K")],
    "durations": [("read_timeout", True, "500ms"), ("read_timeout", False, "1.5")],
    "choices": [("log.level", True, "debug"), ("transport", False, "shm"), ("gpu.path", True, "auto")],
    "numbers": [("threads", False, "4"), ("fabric.window", True, "-1"), ("origin.allow_stale", True, "yes")],
}
for name, picks in seeds.items():
    open(f"{out}/{name}", "wb").write(seed(picks))
PY
