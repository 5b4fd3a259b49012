"""examples/python/bench_dataloader.py runs on a real served store at a small size (the rows
dataset: 3 KB samples) and prints a figure for every method, h5py's included. No speed is
asserted."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, TIMEOUT_S

EXAMPLES = Path(os.environ.get("DDSTAGE_EXAMPLES", Path(__file__).resolve().parents[2] / "examples" / "python"))


def test_bench_dataloader_prints_every_method(store, data):
    pytest.importorskip("torch")
    proc = subprocess.run([PYTHON, EXAMPLES / "bench_dataloader.py", "--store", store.dir, "--dataset", "rows",
                           "--field", "x", "--batch", "32", "--epochs", "1", "--h5", data.root / "rows.h5"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "500 samples of 3072 B ('x'), batch 32, 0 workers, 1 epochs: seconds per epoch", proc.stdout
    figures = {}
    for line in lines[1:5]:
        match = re.match(r"(.+?)\s+best\s+([\d.]+)\s+median\s+([\d.]+)\s+([\d.]+)x Loader$", line)
        assert match, line
        figures[match[1]] = float(match[3])
    assert len(figures) == 4 and all(v > 0 for v in figures.values()), figures
    assert [line.split(":")[0] for line in lines[5:]] == [
        "DataLoader(StoreDataset), per sample / __getitems__", "DataLoader(h5py Dataset), per sample / __getitems__"]
