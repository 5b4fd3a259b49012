"""scripts/slow-origin: usage without root, its refusal (77) where it cannot throttle (not root,
no loop device), and as root a real run: CMD runs in its own blkio cgroup with the read limit on the loop device that
holds DIR, and afterwards nothing is left (cgroup, mount, loop device, DIR); CMD's exit status
is the script's. bench-failover: usage, and bad counts refused."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLOW = REPO / "scripts" / "slow-origin"
FAILOVER = REPO / "scripts" / "bench-failover"
BLKIO = Path("/sys/fs/cgroup/blkio")


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60, **kw)


def test_help_and_bad_usage(tmp_path):
    proc = run(SLOW, "--help")
    assert proc.returncode == 0 and "--bps RATE" in proc.stdout and "77" in proc.stdout
    for args, word in [([], "--bps"), (["--bps", "1Q"], "1Q"), (["--bps", "1M"], "--dir"),
                       (["--bps", "1M", "--dir", tmp_path / "m"], "command"),
                       (["--bps", "1M", "--iops", "x", "--dir", tmp_path / "m", "--", "true"], "--iops")]:
        proc = run(SLOW, *args)
        assert proc.returncode == 2 and word in proc.stderr, (args, proc.stderr)
    proc = run(FAILOVER, "--help")
    assert proc.returncode == 0 and "--ranks N" in proc.stdout
    proc = run(FAILOVER, "--ranks", 2)
    assert proc.returncode == 2 and ">= 3" in proc.stderr, proc.stderr


def test_refused_without_root(tmp_path):
    if os.geteuid() != 0:
        proc = run(SLOW, "--bps", "1M", "--dir", tmp_path / "m", "--", "true")
    elif shutil.which("setpriv"):
        proc = run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   SLOW, "--bps", "1M", "--dir", tmp_path / "m", "--", "true")
    else:
        pytest.skip("root, and no setpriv to drop it")
    assert proc.returncode == 77 and "needs root" in proc.stderr, proc.stderr
    assert not (tmp_path / "m").exists()


def test_throttled_run_leaves_nothing(tmp_path):
    mnt = tmp_path / "m"
    script = 'cat /proc/self/cgroup; cat /sys/fs/cgroup/blkio$(sed -n "s/^[0-9]*:blkio://p" ' \
             '/proc/self/cgroup)/blkio.throttle.read_bps_device; echo "dev $SLOW_ORIGIN_DEVICE"; ' \
             'echo x > "$SLOW_ORIGIN_DIR/f"; exit 3'
    proc = run(SLOW, "--bps", "4M", "--size", "16M", "--dir", mnt, "--", "sh", "-c", script)
    if proc.returncode == 77:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 3, proc.stderr
    lines = proc.stdout.splitlines()
    group = next(l.split(":", 2)[2] for l in lines if ":blkio:" in l)
    assert group.startswith("/ddstage-slow-origin-"), lines
    device = next(l.split()[1] for l in lines if l.startswith("dev "))
    assert f"{device} {4 << 20}" in lines, lines
    assert not (BLKIO / group.lstrip("/")).exists()
    assert not mnt.exists()
    assert str(mnt) not in Path("/proc/mounts").read_text()
    assert "slow-origin" not in run("losetup", "-a").stdout


def test_no_loop_device_is_a_skip(tmp_path):
    """Root in a container without loop devices: 77 with the reason, and nothing left behind
    (its scratch image, DIR)."""
    if os.geteuid() != 0 or not BLKIO.is_dir():
        pytest.skip("needs root and cgroup-v1 blkio to get as far as losetup")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "losetup").write_text("#!/bin/sh\necho 'losetup: cannot find an unused loop device' >&2\nexit 1\n")
    (shim / "losetup").chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "TMPDIR": str(scratch)}
    proc = run(SLOW, "--bps", "1M", "--size", "8M", "--dir", tmp_path / "m", "--", "true", env=env)
    assert proc.returncode == 77 and "no loop device" in proc.stderr, proc.stderr
    assert not (tmp_path / "m").exists() and list(scratch.iterdir()) == []
