"""What the store trusts (issue 13, points 5-7): only a store directory and store.yaml of the
user's own; YAML from config, manifest and descriptor files within limits; and opens and
readers that meet `load --replace` fail, if they fail, with a clear run-time error.

Other users are real: files are given to uid 65534 (nobody) and a store is served as nobody
with setpriv. Every store started here is stopped or killed, by pid."""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import (NOBODY, assert_runtime_error, assert_usage_error, flatten, python_package_dir, read_bytes,
                      require_setpriv)
from test_store import READ_FABRIC, FABRIC_ENV, datasets, serve, status, wait_dead  # noqa: F401 (fixtures)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: shared helpers
from deadlines import STARTUPS, timed, wait_until  # noqa: E402
from local_mpi import MPI_ENV  # noqa: E402

NOBODY_UID = 65534


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def private_copy(descriptor, directory):
    """A copy of a store's descriptor in a directory of its own, as the user would have it."""
    directory.mkdir(mode=0o700)
    copy = directory / "store.yaml"
    shutil.copy(descriptor, copy)
    copy.chmod(0o600)
    return copy


def rewrite_descriptor(path, text):
    """Replaces store.yaml atomically (mode 0600), as the server itself does."""
    tmp = path.with_name(".store.yaml.test")
    tmp.write_text(text)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def store_commands(ddx):
    """Everything that reads a store's descriptor."""
    return [["status"], ["stop"], ["load", ddx, "--name", "other"], ["read", "--dataset", "f", "--ids", "0"]]


# ---- ownership and modes --------------------------------------------------------------------

def test_serve_makes_its_directory_0700_under_umask_000(ddstage, serve, datasets):
    old = os.umask(0)
    try:
        store = serve(0)
    finally:
        os.umask(old)
    assert mode_of(store.dir) == 0o700
    assert mode_of(store.dir / "store.yaml") == 0o600
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    assert all(mode_of(Path("/dev/shm") / s) == 0o600 for s in store.segments())
    store.stop()


def test_serve_refuses_a_directory_others_can_write_or_own(ddstage, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY_UID, NOBODY_UID)
    for directory, words in ((shared, ["writable by its group and other users", "chmod go-w"]),
                             (theirs, ["owned by uid 65534, not you"])):
        proc = ddstage.run("serve", "--store", directory, "--listen", "127.0.0.1:0", env=MPI_ENV)
        assert_usage_error(proc, str(directory), *words)
        assert not (directory / "store.yaml").exists()
    assert mode_of(shared) == 0o777  # refused, not changed behind the user's back


def test_clients_refuse_a_descriptor_others_can_write_or_own(ddstage, serve, datasets, tmp_path):
    """A descriptor another user wrote names their store: root must neither read from it nor
    stop it. Each case is one clear line, exit 2, and the store it names keeps serving."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    copy = private_copy(store.dir / "store.yaml", tmp_path / "mine")
    assert ddstage.ok("read", "--store", copy.parent, "--dataset", "f", "--ids", "3", binary=True).stdout == \
        read_bytes(ddstage, datasets["files"], "3")  # the user's own copy is trusted
    cases = [
        (lambda: copy.chmod(0o622), copy, "writable by its group and other users"),
        (lambda: copy.chmod(0o620), copy, "writable by its group"),
        (lambda: os.chown(copy, NOBODY_UID, NOBODY_UID), copy, "owned by uid 65534, not you (uid 0)"),
        (lambda: copy.parent.chmod(0o757), copy.parent, "writable by other users"),
        (lambda: os.chown(copy.parent, NOBODY_UID, NOBODY_UID), copy.parent, "owned by uid 65534"),
    ]
    for break_it, named, words in cases:
        break_it()
        for cmd in store_commands(datasets["rows"]):
            proc = ddstage.run(cmd[0], "--store", copy.parent, *cmd[1:])
            assert_usage_error(proc, str(named), words)
        os.chown(copy.parent, 0, 0)
        os.chown(copy, 0, 0)
        copy.parent.chmod(0o700)
        copy.chmod(0o600)
    assert [d["name"] for d in status(ddstage, store.dir)["datasets"]] == ["f"]
    store.stop()


def test_segment_planted_by_another_user_is_refused(ddstage, serve, datasets):
    """/dev/shm is everyone's: a segment of the name store.yaml gives, but created by another
    user (here: the real one's bytes, owned by nobody, 0644), is refused with one line naming
    it, exit 2, rather than read with exit 0."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    store_id = yaml.safe_load((store.dir / "store.yaml").read_text())["id"]
    [segment] = Path("/dev/shm").glob(f"ddstage-{store_id}-*-r1")
    real = segment.read_bytes()
    segment.unlink()
    segment.write_bytes(real)
    os.chown(segment, NOBODY_UID, NOBODY_UID)
    segment.chmod(0o644)
    try:
        proc = ddstage.run("read", "--store", store.dir, "--dataset", "f", "--ids", "0-299")
        assert_usage_error(proc, segment.name, "owned by uid 65534")
    finally:
        segment.unlink()
        fd = os.open(segment, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, real)
        os.close(fd)
    assert ddstage.ok("read", "--store", store.dir, "--dataset", "f", "--ids", "0-299", binary=True).stdout == \
        read_bytes(ddstage, datasets["files"], "0-299")
    store.stop()


def test_symlinked_or_special_descriptor_is_refused(ddstage, serve, datasets, tmp_path):
    store = serve(0)
    linked = tmp_path / "linked"
    linked.mkdir(mode=0o700)
    (linked / "store.yaml").symlink_to(store.dir / "store.yaml")
    for cmd in store_commands(datasets["rows"]):
        assert_usage_error(ddstage.run(cmd[0], "--store", linked, *cmd[1:]), "store.yaml is a symbolic link")
    fifo = tmp_path / "fifo"
    fifo.mkdir(mode=0o700)
    os.mkfifo(fifo / "store.yaml", 0o600)
    assert_usage_error(ddstage.run("status", "--store", fifo), "not a regular file")  # and no hang
    # serve refuses the linked directory too, rather than adopting someone's descriptor.
    proc = ddstage.run("serve", "--store", linked, "--listen", "127.0.0.1:0", env=MPI_ENV)
    assert_usage_error(proc, "symbolic link")
    store.stop()


@pytest.fixture
def nobody_store(ddstage, world_dir):
    """A store served by uid 65534 in a directory of its own, the descriptor root must not trust."""
    require_setpriv()
    directory = world_dir / "theirs"
    env = {**os.environ, **MPI_ENV, "HOME": str(world_dir), "XDG_CONFIG_HOME": str(world_dir / "xdg"),
}
    log = open(world_dir / "serve.log", "w+")
    proc = subprocess.Popen([*NOBODY, ddstage.path, "serve", "--store", directory, "--listen", "127.0.0.1:0"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (directory / "store.yaml").exists():
        assert proc.poll() is None and time.monotonic() < deadline, log.read()
        time.sleep(0.05)
    pid = yaml.safe_load((directory / "store.yaml").read_text())["ranks"][0]["pid"]
    yield directory, env
    if proc.poll() is None:
        subprocess.run([*NOBODY, ddstage.path, "stop", "--store", directory], env=env, timeout=60)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert wait_dead([pid])


def test_root_does_not_read_or_stop_another_users_store(ddstage, nobody_store, datasets):
    directory, env = nobody_store
    assert os.stat(directory).st_uid == NOBODY_UID and mode_of(directory) == 0o700
    for cmd in store_commands(datasets["rows"]):
        assert_usage_error(ddstage.run(cmd[0], "--store", directory, *cmd[1:]), "owned by uid 65534")
    # Their store still runs, and answers them.
    proc = subprocess.run([*NOBODY, ddstage.path, "status", "--store", directory], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# ---- YAML limits ----------------------------------------------------------------------------

ALIAS_LOOP = "a: &a\n  b: *a\n"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text,words", [
    (ALIAS_LOOP, ["aliases are not allowed", "line 2"]),
    ("a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n", ["aliases are not allowed"]),
    (DEEP, ["nested deeper than 16 levels"]),
    ("# " + "x" * (1 << 20) + "\n", ["larger than the 1 MiB allowed"]),
], ids=["alias-loop", "alias-bomb", "deep", "huge"])
def test_config_file_yaml_is_bounded(ddstage, tmp_path, datasets, text, words):
    """A hostile config file is one line naming it, exit 2, for every command, given with
    --config or found in the default place."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    assert_usage_error(ddstage.run("--config", config, "info", "--settings"), f"config file {config}", *words)
    xdg = tmp_path / "xdg"
    (xdg / "ddstage").mkdir(parents=True)
    shutil.copy(config, xdg / "ddstage" / "config.yaml")
    for cmd in (["info", "--settings"], ["info", datasets["files"]], ["read", datasets["files"], "--ids", "0"],
                ["status", "--store", tmp_path]):
        assert_usage_error(ddstage.run(*cmd, env={"XDG_CONFIG_HOME": str(xdg)}), "config file", *words)


def test_config_that_never_ends_is_refused(ddstage):
    assert_usage_error(ddstage.run("--config", "/dev/zero", "info", "--settings"), "config file /dev/zero",
                       "larger than the 1 MiB allowed")


@pytest.mark.parametrize("append,words", [
    ("extra: &e [1]\nmore: *e\n", ["aliases are not allowed"]),
    ("extra: " + "[" * 1000 + "]" * 1000 + "\n", ["nested deeper than 32 levels"]),
    ("# " + "x" * (16 << 20) + "\n", ["larger than the 16 MiB allowed"]),
], ids=["alias", "deep", "huge"])
def test_manifest_yaml_is_bounded(ddstage, datasets, tmp_path, append, words):
    ddx = tmp_path / "copy.ddx"
    shutil.copytree(datasets["files"], ddx)
    manifest = ddx / "manifest.yaml"
    with open(manifest, "a") as f:
        f.write(append)
    for cmd in (["info", ddx], ["read", ddx, "--ids", "0"]):
        assert_runtime_error(ddstage.run(*cmd), str(manifest), *words)


def test_manifest_that_is_a_fifo_is_refused_without_blocking(ddstage, datasets, tmp_path):
    ddx = tmp_path / "fifo.ddx"
    shutil.copytree(datasets["files"], ddx)
    (ddx / "manifest.yaml").unlink()
    os.mkfifo(ddx / "manifest.yaml")
    for cmd in (["info", ddx], ["read", ddx, "--ids", "0"]):
        assert_runtime_error(ddstage.run(*cmd), str(ddx / "manifest.yaml"), "not a regular file")


@pytest.mark.parametrize("text,words", [
    ("format_version: 1\ntoken: &t [*t]\n", ["aliases are not allowed"]),
    ("format_version: 1\nranks: " + "[" * 1000 + "]" * 1000 + "\n", ["nested deeper than 32 levels"]),
    ("# " + "x" * (16 << 20) + "\n", ["larger than the 16 MiB allowed"]),
], ids=["alias", "deep", "huge"])
def test_descriptor_yaml_is_bounded(ddstage, tmp_path, text, words):
    directory = tmp_path / "store"
    directory.mkdir(mode=0o700)
    rewrite_descriptor(directory / "store.yaml", text)
    for cmd in (["status"], ["stop"], ["read", "--dataset", "f", "--ids", "0"]):
        assert_runtime_error(ddstage.run(cmd[0], "--store", directory, *cmd[1:]), "store.yaml", *words)


# ---- load --replace -------------------------------------------------------------------------

def test_open_waits_for_a_replace_to_publish(ddstage, serve, datasets):
    """A segment store.yaml names but that is gone (a replace between unlinking the old shard
    and publishing the new one): the open waits for the new names, up to read_timeout, then
    fails with exit 1 saying the dataset is being replaced; never 'cannot open' as usage."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    read = ["read", "--store", store.dir, "--dataset", "f", "--ids", "0-299"]
    read_timeout_s = 1
    _, read_s = timed(ddstage.ok, *read, binary=True, env={"DDSTAGE_READ_TIMEOUT": f"{read_timeout_s}s"})
    descriptor = store.dir / "store.yaml"
    real = descriptor.read_text()
    gone = real.replace("-r1", "-r1-gone")
    assert gone != real
    rewrite_descriptor(descriptor, gone)
    proc, took = timed(ddstage.run, *read, env={"DDSTAGE_READ_TIMEOUT": f"{read_timeout_s}s"})
    assert took < read_timeout_s + STARTUPS * read_s, f"the read took {took:.1f} s, {read_s:.2f} s before"
    assert_runtime_error(proc, "dataset 'f' is being replaced", "-r1-gone", "open it again")
    # Published while the open waits (asleep between its looks at store.yaml): it reads the new
    # names and succeeds.
    waiting_s = 60
    reader = subprocess.Popen([ddstage.path, *map(str, read)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "DDSTAGE_READ_TIMEOUT": f"{waiting_s}s"})
    wait_until(lambda: reader.poll() is not None or
               Path(f"/proc/{reader.pid}/wchan").read_text() == "hrtimer_nanosleep",
               waiting_s, "the reader never waited")
    assert reader.poll() is None, reader.communicate()
    rewrite_descriptor(descriptor, real)
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    assert out == read_bytes(ddstage, datasets["files"], "0-299")
    store.stop()


def test_reads_during_repeated_replace_fail_only_with_a_clear_runtime_error(ddstage, serve, datasets):
    """Reader loops over the CLI while `load --replace` runs 15 times: every read returns the
    right bytes, or exits 1 saying the dataset is being (or was) replaced; none is a usage error."""
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    expected = read_bytes(ddstage, datasets["files"], "0-9")
    done = threading.Event()
    outcomes = []

    def read_loop():
        while not done.is_set():
            proc = ddstage.run("read", "--store", store.dir, "--dataset", "f", "--ids", "0-9", binary=True)
            outcomes.append((proc.returncode, proc.stdout == expected, proc.stderr.decode(errors="replace")))

    readers = [threading.Thread(target=read_loop) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        for _ in range(15):
            ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f", "--replace")
    finally:
        done.set()
        for t in readers:
            t.join(timeout=120)
    assert outcomes
    for rc, right, err in outcomes:
        if rc == 0:
            assert right
        else:
            assert rc == 1 and "replaced" in err and err.count("ddstage: error:") == 1, (rc, err)
    store.stop()


def python_module():
    """The ddstage package of this build (next to the CLI's build tree), or a visible skip."""
    sys.path.insert(0, str(python_package_dir()))
    import ddstage as module
    return module


@pytest.mark.parametrize("transport", ["shm", "fabric"])
def test_reader_that_outlived_a_replace_says_so(ddstage, serve, datasets, transport, monkeypatch):
    """A reader opened before `load --replace` fails every batch with an error naming the
    dataset and 'replaced' (over shared memory it would otherwise return the old rows, over
    libfabric fail as 'Broken pipe'); the dataset opened again reads the new load."""
    dd = python_module()
    fabric = transport == "fabric"
    monkeypatch.setenv("FI_TCP_IFACE", "lo")
    store = serve(2, args=["--transport", "fabric"] if fabric else [], env=FABRIC_ENV if fabric else None)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    settings = {"transport": transport, "read_timeout": "3s", **(
        {"fabric.provider": "tcp", "fabric.domain": "lo"} if fabric else {})}
    client = dd.Client(store.dir, settings)
    old = client.open("f")
    expected = read_bytes(ddstage, datasets["files"], "0-299")
    data, _ = old.get_batch("data", list(range(300)))
    assert data.tobytes() == expected
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f", "--replace",
               env=FABRIC_ENV if fabric else None)
    for _ in range(2):
        with pytest.raises(dd.Error) as e:
            old.get_batch("data", list(range(300)))
        assert "dataset 'f' was replaced" in str(e.value) and "reopen it" in str(e.value)
        assert not isinstance(e.value, dd.UsageError)
    data, _ = client.open("f").get_batch("data", list(range(300)))
    assert data.tobytes() == expected
    store.stop()


# ---- other users on the node ----------------------------------------------------------------

def test_segment_names_cannot_be_taken_first_by_another_user(ddstage, serve, datasets):
    """Another local user who creates, in /dev/shm, the names a store's next loads would take
    when they were predictable ("ddstage-ID-DATASET-gN-rR") blocks nothing: every region's name
    carries a random part, new each time (issue 28). The planted files stay theirs."""
    if os.geteuid() != 0:
        pytest.skip("files of another user (nobody) are made with setpriv, as root")
    require_setpriv()
    store = serve(2)
    ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f")
    store_id = store.descriptor["id"]
    named = re.compile(rf"^ddstage-{store_id}-[fg]-g\d+-[0-9a-f]{{12}}-r[01]$")
    first = [s for s in store.segments() if not s.endswith(".lock")]
    assert len(first) == 2 and all(named.match(s) for s in first), first
    planted = [Path("/dev/shm") / f"ddstage-{store_id}-{name}-g{g}-r{r}"
               for name in ("f", "g") for g in range(1, 9) for r in range(2)]
    subprocess.run([*NOBODY, "touch", *planted], check=True, timeout=30)
    try:
        ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "g")
        ddstage.ok("load", "--store", store.dir, datasets["files"], "--name", "f", "--replace")
        ours = [s for s in store.segments() if named.match(s)]
        assert len(ours) == len(first) * 2 and not set(ours) & set(first), (first, ours)
        expected = read_bytes(ddstage, datasets["files"], "0-299")
        for name in ("f", "g"):
            assert ddstage.ok("read", "--store", store.dir, "--dataset", name, "--ids", "0-299",
                              binary=True).stdout == expected
        assert all(p.stat().st_uid == NOBODY_UID for p in planted)
    finally:
        for p in planted:
            p.unlink(missing_ok=True)
    store.stop()
