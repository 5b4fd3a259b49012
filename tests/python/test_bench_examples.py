"""The example scripts that read `ddstage bench --json` (examples/python/bench_loader.py), run on a
real served store and the JSON the real `ddstage bench store` writes: a change of the JSON's
layout that breaks one fails here. No speed is asserted."""
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, PYTHON, TIMEOUT_S

EXAMPLES = Path(os.environ.get("DDSTAGE_EXAMPLES", Path(__file__).resolve().parents[2] / "examples" / "python"))
BENCH_LOADER = EXAMPLES / "bench_loader.py"


def bench_loader_module():
    """bench_loader.py as a module (it imports ddstage.torch, hence torch)."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("bench_loader", BENCH_LOADER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_loader_runs_on_a_served_store(store):
    """One repeat at a small size: every figure printed as a number, C++'s from the JSON of
    `ddstage bench store` (its matrix cell at this batch, not a cell paired with a floor)."""
    pytest.importorskip("torch")
    proc = subprocess.run([PYTHON, BENCH_LOADER, "--store", store.dir, "--dataset", "rows", "--field", "x",
                           "--batch", "16", "--samples", "320", "--repeats", "1", "--step-us", "100",
                           "--ddstage", BIN], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("batch 16 of 'x', 1 runs of 320 rows"), proc.stdout
    figures = {}
    for line in lines[1:]:
        match = re.match(r"(.+?)\s+median\s+([\d.]+) \(\s*[+-]\d+%\)\s+best\s+([\d.]+)", line)
        assert match, line
        figures[match[1]] = float(match[2])
    assert len(figures) == 8 and all(v > 0 for v in figures.values()), figures
    assert "C++ get_batch (ddstage bench store)" in figures


def test_bench_loader_refuses_another_schema(store, tmp_path):
    """bench_loader.py reads the schema `ddstage bench store` writes, and stops with one line
    naming the schema it found when a JSON has another layout (or none, as before
    ddstage-bench/2)."""
    module = bench_loader_module()
    real = tmp_path / "store.json"
    subprocess.run([BIN, "bench", "store", "--store", store.dir, "--dataset", "rows", "--field", "x", "--batch",
                    "4", "--samples", "16", "--json", real], check=True, capture_output=True, timeout=TIMEOUT_S)
    report = json.loads(real.read_text())
    assert report["schema"] == module.SCHEMA
    assert module.bench_cells(real) == report["cells"]
    for schema, words in (("ddstage-bench/1", "schema ddstage-bench/1"), (None, "schema none")):
        other = tmp_path / "other.json"
        other.write_text(json.dumps({k: v for k, v in {**report, "schema": schema}.items() if v is not None}))
        with pytest.raises(SystemExit) as stop:
            module.bench_cells(other)
        assert words in str(stop.value) and module.SCHEMA in str(stop.value)
