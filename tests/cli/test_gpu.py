"""GPU destinations from the command line: `info --gpu` reports what this build and node have,
`read --gpu` reads a served store into device memory (byte for byte the host read where a GPU
exists; one "no GPU" line and exit 1 where none does, as on CI), and a bad gpu.path is a usage
error. The device-side tests proper are tests/gpu/ (label hardware)."""
import json

import pytest

from conftest import assert_runtime_error, assert_usage_error, flatten
from test_store import serve  # noqa: F401  (the fixture)


@pytest.fixture(autouse=True)
def no_cached_path(monkeypatch, tmp_path_factory):
    """gpu.path=auto finds no bench result: the runner's own cache must not leak in."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache-empty")))


def gpu_state(ddstage):
    return json.loads(ddstage.ok("info", "--gpu", "--json").stdout)


def has_gpu(state):
    return any(r["devices"] > 0 for r in state["runtimes"])


@pytest.fixture
def rows(ddstage, gen, tmp_path):
    gen.ok("hdf5-rows", tmp_path / "rows.h5", "--samples", "64", "--shape", "768", "--dtype", "float32")
    return flatten(ddstage, tmp_path / "rows.ddx", tmp_path / "rows.h5", "--field", "x=/features",
                   "--field", "y=/labels")


def test_info_gpu_reports_runtimes_and_devices_or_reason(ddstage):
    state = gpu_state(ddstage)
    build = next(line for line in ddstage.ok("info", "--settings").stdout.splitlines()
                 if line.startswith("build: "))
    built = [r["runtime"] for r in state["runtimes"]]
    assert ("cuda" in built) == ("CUDA=1" in build) and ("hip" in built) == ("HIP=1" in build)
    assert state["gpu_path_setting"] == "auto" and state["cached_path"] == ""
    text = ddstage.ok("info", "--gpu").stdout
    for r in state["runtimes"]:
        assert len(r["host_register_read_only"]) == r["devices"]
        if r["devices"] == 0:
            assert r["reason"] and f"{r['runtime']}: no GPU: {r['reason']}" in text
        else:
            assert f"{r['runtime']}: {r['devices']} device(s)" in text
    if not built:
        assert "runtimes: none" in text
    assert "gpu.path=auto (auto: staged, from no bench result)" in text
    staged = gpu_state_with(ddstage, {"DDSTAGE_GPU_PATH": "staged"})
    assert staged["gpu_path_setting"] == "staged"


def gpu_state_with(ddstage, env):
    return json.loads(ddstage.ok("info", "--gpu", "--json", env=env).stdout)


def test_read_gpu_from_a_served_store(ddstage, serve, rows):  # noqa: F811
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows")
    base = ["read", "--store", store.dir, "--dataset", "rows", "--ids", "5-40,3,3", "--field", "x"]
    host = ddstage.ok(*base, binary=True).stdout
    assert len(host) == 38 * 3072
    if not has_gpu(gpu_state(ddstage)):
        for path in ("staged", "direct", "auto"):
            proc = ddstage.run(*base, "--gpu", "0", "--gpu-path", path, "--verify", binary=True)
            assert_runtime_error(proc, "no GPU")
            assert proc.stdout == b""
    else:
        for path in ("staged", "direct", "auto"):
            proc = ddstage.ok(*base, "--gpu", "0", "--gpu-path", path, "--verify", "-v", binary=True)
            assert proc.stdout == host
            assert f"GPU batches go {'staged' if path == 'auto' else path}" in proc.stderr.decode()
    store.stop()


def test_gpu_usage_errors(ddstage, serve, rows):  # noqa: F811
    assert_usage_error(ddstage.run("read", rows, "--ids", "0", "--gpu", "0"), "--gpu", "--store")
    assert_usage_error(ddstage.run("info", "--gpu", env={"DDSTAGE_GPU_PATH": "sideways"}),
                       "sideways", "gpu.path", "direct|staged|auto")
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows")
    proc = ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "0", "--gpu", "0",
                       "--gpu-path", "sideways")
    assert_usage_error(proc, "sideways", "gpu.path")
    assert_usage_error(ddstage.run("read", "--store", store.dir, "--dataset", "rows", "--ids", "0",
                                   "--gpu", "-1"), "--gpu")
    store.stop()


def test_bench_store_gpu_destinations(ddstage, serve, rows, tmp_path):  # noqa: F811
    """bench store --dest host,gpu: a cell per destination and gpu path where a GPU exists (and
    the faster path cached for gpu.path=auto); one "no GPU" line and exit 1, before measuring,
    where none does. Bad destinations and paths are usage errors."""
    store = serve(ranks=0)
    ddstage.ok("load", "--store", store.dir, rows, "--name", "rows")
    base = ["bench", "store", "--store", store.dir, "--dataset", "rows", "--field", "x", "--samples", "64",
            "--batch", "1,16"]
    out = tmp_path / "gpu.json"
    proc = ddstage.run(*base, "--dest", "host,gpu", "--gpu-path", "direct,staged", "--json", out)
    if not has_gpu(gpu_state(ddstage)):
        assert_runtime_error(proc, "no GPU")
        assert proc.stdout == "" and not out.exists()
    else:
        assert proc.returncode == 0, proc.stderr
        report = json.loads(out.read_text())
        dests = {(c["dims"]["dest"], c["dims"]["batch"]) for c in report["cells"] if "dest" in c["dims"]}
        assert dests == {(d, b) for d in ("host", "gpu:direct", "gpu:staged") for b in (1, 16)}
        assert any("gpu.path=auto on this node is now" in n for n in report["notes"])
        assert gpu_state(ddstage)["cached_path"] in ("direct", "staged")
    assert_usage_error(ddstage.run(*base, "--dest", "tpu"), "--dest", "tpu")
    assert_usage_error(ddstage.run(*base, "--dest", "gpu", "--gpu-path", "sideways"), "--gpu-path", "sideways")
    assert_usage_error(ddstage.run("bench", "store", "--synthetic", "3K", "--dest", "gpu"), "--dest", "served")
    store.stop()
