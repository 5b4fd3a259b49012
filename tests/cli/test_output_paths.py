"""Every output path the CLI takes (`read -o`, `bench --json/--csv/--plot`) writes through
devices, FIFOs, sockets and /dev/std*, and renames atomically only over regular files (through
symlinks, which stay symlinks). As root, the old rename replaced /dev/null for every user of the
node, so no test here points an output at the node's own /dev entries as root: it makes its own
device nodes with mknod."""
import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import (NOBODY, TIMEOUT_S, assert_runtime_error, flatten, partials_beside, read_bytes,
                      require_setpriv)

N = 40


@pytest.fixture(scope="module")
def dataset(ddstage, tmp_path_factory):
    d = tmp_path_factory.mktemp("outputs")
    np.save(d / "y.npy", np.arange(N, dtype=np.int64) * 7)
    return flatten(ddstage, d / "y.ddx", d / "y.npy")


def make_char_device(path, minor):
    """A character device node of the mem driver (1:3 null, 1:7 full), or a visible skip."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod is not permitted here (needs CAP_MKNOD)")
    return path


def is_char_device(path):
    return stat.S_ISCHR(os.lstat(path).st_mode)


def read_fifo(path, sink):
    """Drains a FIFO into sink (a list) from another thread, so the writer can open it."""
    def drain():
        with open(path, "rb") as f:
            sink.append(f.read())
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    return t


def test_device_is_written_through_not_replaced(ddstage, dataset, tmp_path):
    null = make_char_device(tmp_path / "null", 3)
    ddstage.ok("read", dataset, "--ids", f"0-{N - 1}", "-o", null)
    assert is_char_device(null)
    assert partials_beside(null) == []


def test_symlink_to_a_device_stays_a_symlink_to_that_device(ddstage, dataset, tmp_path):
    null = make_char_device(tmp_path / "null", 3)
    link = tmp_path / "out.bin"
    link.symlink_to(null)
    ddstage.ok("read", dataset, "--ids", "0-9", "-o", link)
    assert link.is_symlink() and os.readlink(link) == str(null) and is_char_device(null)


def test_full_device_is_a_runtime_error_and_stays_a_device(ddstage, dataset, tmp_path):
    full = make_char_device(tmp_path / "full", 7)
    assert_runtime_error(ddstage.run("read", dataset, "--ids", "0-9", "-o", full), "space")
    assert is_char_device(full)
    assert partials_beside(full) == []


def test_fifo_receives_the_bytes_and_stays_a_fifo(ddstage, dataset, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = read_fifo(fifo, got)
    ddstage.ok("read", dataset, "--ids", "5,3,5", "-o", fifo)
    reader.join(TIMEOUT_S)
    assert got == [read_bytes(ddstage, dataset, "5,3,5")]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_socket_is_not_replaced(ddstage, dataset, tmp_path):
    """A Unix socket cannot be opened for writing: a clear error, and the socket stays."""
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        proc = ddstage.run("read", dataset, "--ids", "0", "-o", path)
        assert proc.returncode in (1, 2) and proc.stderr.startswith("ddstage: error:")
        assert str(path) in proc.stderr
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_dev_stdout_appends_where_the_shell_redirected(ddstage, dataset, tmp_path):
    """/dev/stdout is the process's own descriptor: `>> FILE` keeps what FILE held, and FILE is
    never renamed over (its inode stays)."""
    out = tmp_path / "log.bin"
    out.write_bytes(b"HEAD")
    inode = out.stat().st_ino
    with open(out, "ab") as f:
        subprocess.run([ddstage.path, "read", dataset, "--ids", "1-3", "-o", "/dev/stdout"], stdout=f,
                       check=True, timeout=TIMEOUT_S)
    assert out.read_bytes() == b"HEAD" + read_bytes(ddstage, dataset, "1-3")
    assert out.stat().st_ino == inode


def test_dev_stdout_into_a_pipe(ddstage, dataset):
    proc = ddstage.ok("read", dataset, "--ids", "7", "-o", "/dev/stdout", binary=True)
    assert proc.stdout == read_bytes(ddstage, dataset, "7")


def test_dev_null_as_an_ordinary_user(ddstage, dataset, world_dir):
    """The real /dev/null, as uid 65534 (who cannot replace it): written through, exit 0. Before,
    the write went to /dev/null.partial, which only root may create."""
    require_setpriv()
    src = world_dir / "y.npy"
    src.write_bytes((dataset.parent / "y.npy").read_bytes())
    ddx = flatten(ddstage, world_dir / "y.ddx", src)
    for p in [src, ddx, *ddx.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    ddstage.ok("read", ddx, "--ids", "0-9", "-o", "/dev/null", prefix=NOBODY)
    assert is_char_device("/dev/null")


def test_symlink_to_a_regular_file_keeps_the_link(ddstage, dataset, tmp_path):
    target = tmp_path / "data" / "real.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    target.chmod(0o600)
    link = tmp_path / "link.bin"
    link.symlink_to(Path("data") / "real.bin")
    ddstage.ok("read", dataset, "--ids", "2,4", "-o", link)
    assert link.is_symlink()
    assert target.read_bytes() == read_bytes(ddstage, dataset, "2,4")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600, "a replaced file keeps its permission bits"
    assert partials_beside(target) == [] and partials_beside(link) == []


def test_dangling_symlink_creates_its_target(ddstage, dataset, tmp_path):
    link = tmp_path / "link.bin"
    link.symlink_to(tmp_path / "new.bin")
    ddstage.ok("read", dataset, "--ids", "0", "-o", link)
    assert link.is_symlink() and (tmp_path / "new.bin").read_bytes() == read_bytes(ddstage, dataset, "0")


def test_new_file_follows_the_umask(ddstage, dataset, tmp_path):
    out = tmp_path / "new.bin"
    ddstage.ok("read", dataset, "--ids", "0", "-o", out, preexec_fn=lambda: os.umask(0o077))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_symlink_loop_is_a_usage_error(ddstage, dataset, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    proc = ddstage.run("read", dataset, "--ids", "0", "-o", a)
    assert proc.returncode == 2 and "symbolic links" in proc.stderr
    assert a.is_symlink() and b.is_symlink()


def test_bench_outputs_write_through_devices_and_fifos(ddstage, dataset, tmp_path):
    """--json and --csv to device nodes, --plot through a FIFO (named .png, as gnuplot's terminal
    is chosen by extension): each stays what it was, and the FIFO gets a PNG."""
    null = make_char_device(tmp_path / "null", 3)
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    got = []
    reader = read_fifo(fifo, got)
    ddstage.ok("bench", "origin", dataset, "--samples", "200", "--json", null, "--csv", null, "--plot", fifo)
    reader.join(TIMEOUT_S)
    assert got and got[0].startswith(b"\x89PNG")
    assert is_char_device(null) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert partials_beside(null) == [] and partials_beside(fifo) == []


def test_bench_json_over_a_regular_file_is_atomic(ddstage, dataset, tmp_path):
    out = tmp_path / "bench.json"
    out.write_text("previous")
    ddstage.ok("bench", "origin", dataset, "--samples", "200", "--json", out)
    assert out.read_text().lstrip().startswith("{")
    assert partials_beside(out) == []
