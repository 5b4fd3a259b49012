#!/usr/bin/env python3
"""Python's cost over C++ per batch: `ddstage bench store` (C++ get_batch into a reused buffer)
against, in the same run, the Python reader (a new array per batch, and out= into a reused
one) and the torch Loader with one reader thread: the thread's fetch per batch (into new
tensors), the wall time per batch of a consumer that does nothing (every batch a thread
hand-over), and of one that sleeps --step-us per batch like a training step, with its wait
in next(). Random rows of one fixed-size field, the same batch size for all.

    python3 bench_loader.py --store DIR --dataset rows --field x --batch 64 [--ddstage PATH]

Each figure is the mean µs per batch of a run, as the median and the best of --repeats runs;
the noise of a shared machine moves single runs by tens of percent.
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time

import numpy as np

import ddstage
import ddstage.torch


# The layout of `ddstage bench --json` this script reads (man ddstage-bench, JSON schema).
SCHEMA = "ddstage-bench/2"


def bench_cells(path):
    """The cells of a bench JSON, after checking that it is the layout this script knows."""
    with open(path) as f:
        report = json.load(f)
    schema = report.get("schema", "none (before ddstage-bench/2)")
    if schema != SCHEMA:
        raise SystemExit(f"bench_loader.py: {path} has bench JSON schema {schema}; this script reads {SCHEMA}")
    return report["cells"]


def cpp_us_per_batch(args):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([args.ddstage, "bench", "store", "--store", args.store, "--dataset", args.dataset,
                        "--field", args.field, "--batch", str(args.batch), "--samples", str(args.samples),
                        "--json", out.name], check=True, capture_output=True, timeout=600)
        cells = bench_cells(out.name)
    # The matrix cell of this batch (cells with a peer read one rank's rows only, for x_raw).
    cell = next(c for c in cells if c["dims"]["mode"] == "get_batch" and c["dims"]["batch"] == args.batch
                and "peer" not in c["dims"])
    return cell["mean_us"] * args.batch


def reader_us_per_batch(dataset, args, reuse):
    reader = dataset.reader()
    batches = np.random.default_rng(args.repeats).integers(0, dataset.samples, args.samples)
    batches = batches[: len(batches) // args.batch * args.batch].reshape(-1, args.batch)
    out = np.empty((args.batch, *dataset.field(args.field).shape), dataset.field(args.field).dtype)
    start = time.perf_counter()
    for ids in batches:
        reader.get_batch(args.field, ids, out=out if reuse else None)
    return (time.perf_counter() - start) / len(batches) * 1e6


class TimedLoader(ddstage.torch.Loader):
    """A Loader that records how long its reader thread takes to read each batch into tensors."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.fetch_s = []

    def _read(self, reader, ids):
        start = time.perf_counter()
        batch = super()._read(reader, ids)
        self.fetch_s.append(time.perf_counter() - start)
        return batch


def loader_us_per_batch(dataset, args, epoch, step_s):
    """(reader thread's fetch, consumer's wall time per batch, consumer's wait in next()) in µs,
    the consumer spending step_s per batch as a training step would (the GIL released)."""
    loader = TimedLoader(dataset, fields=[args.field], batch_size=args.batch, shuffle=True, seed=1,
                         threads=1, prefetch=2, drop_last=True)
    loader.set_epoch(epoch)
    batches = min(len(loader), args.samples // args.batch)
    waited = 0.0
    start = time.perf_counter()
    it = iter(loader)
    for _ in range(batches):
        t = time.perf_counter()
        next(it)
        waited += time.perf_counter() - t
        if step_s:
            time.sleep(step_s)
    wall = time.perf_counter() - start
    it.close()
    return (statistics.mean(loader.fetch_s[:batches]) * 1e6, wall / batches * 1e6, waited / batches * 1e6)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--field", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=20000, help="rows per run")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--step-us", type=int, default=200, help="simulated training step per batch")
    p.add_argument("--ddstage", default="ddstage", help="the ddstage binary")
    args = p.parse_args()
    dataset = ddstage.Client(args.store).open(args.dataset)
    cpp = "C++ get_batch (ddstage bench store)"
    runs = {cpp: [], "Python get_batch, out= reused": [], "Python get_batch, new array": [],
            "Loader fetch in its thread, idle consumer": [], "Loader, idle consumer: wall": [],
            f"Loader fetch in its thread, {args.step_us} µs steps": [],
            f"Loader, {args.step_us} µs steps: wall": [], f"Loader, {args.step_us} µs steps: wait": []}
    for r in range(args.repeats):  # interleaved, so drifts of the machine hit every figure alike
        runs[cpp].append(cpp_us_per_batch(args))
        runs["Python get_batch, out= reused"].append(reader_us_per_batch(dataset, args, reuse=True))
        runs["Python get_batch, new array"].append(reader_us_per_batch(dataset, args, reuse=False))
        fetch, wall, _ = loader_us_per_batch(dataset, args, r, 0)
        runs["Loader fetch in its thread, idle consumer"].append(fetch)
        runs["Loader, idle consumer: wall"].append(wall)
        fetch, wall, wait = loader_us_per_batch(dataset, args, r, args.step_us / 1e6)
        runs[f"Loader fetch in its thread, {args.step_us} µs steps"].append(fetch)
        runs[f"Loader, {args.step_us} µs steps: wall"].append(wall)
        runs[f"Loader, {args.step_us} µs steps: wait"].append(wait)
    base = statistics.median(runs[cpp])
    best = min(runs[cpp])
    print(f"batch {args.batch} of '{args.field}', {args.repeats} runs of {args.samples} rows: µs per batch, "
          f"median and best run, each against C++'s")
    for name, values in runs.items():
        med, low = statistics.median(values), min(values)
        print(f"{name:44s} median {med:7.1f} ({(med / base - 1) * 100:+4.0f}%)   best {low:7.1f} "
              f"({(low / best - 1) * 100:+4.0f}%)")


if __name__ == "__main__":
    main()
