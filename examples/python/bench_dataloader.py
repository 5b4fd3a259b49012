#!/usr/bin/env python3
"""Seconds per epoch of torch's DataLoader over ddstage against ddstage's own Loader and h5py:
(a) DataLoader over StoreDataset, a whole batch per call (__getitems__); (b) the same read one
sample per call (__getitem__, what a Dataset without __getitems__ gets); (c) ddstage.torch.Loader;
(d) a map-style Dataset reading the origin HDF5 file with h5py, one sample per call (when h5py
is importable and --h5 names the file). Every epoch reads the whole dataset in a new random
order, batch --batch, the consumer doing nothing with the batches.

    ddstage-gen hdf5-rows rows.h5 --samples 20000 --shape 768 --dtype float32   # 3 KB samples
    ddstage flatten rows.h5 --field x=/features -o rows.ddx && ddstage load --store DIR rows.ddx
    python3 bench_dataloader.py --store DIR --dataset rows --field x --h5 rows.h5 --h5-key features

Methods take turns epoch by epoch (--epochs rounds after one warm-up round); each figure is the
best and the median epoch. A shared machine moves single epochs by tens of percent.
"""
import argparse
import itertools
import statistics
import time

import torch.utils.data

import ddstage.torch

try:
    import h5py
except ImportError:
    h5py = None


class PerSample(ddstage.torch.StoreDataset):
    """StoreDataset read one sample per DataLoader call: torch takes a false __getitems__ for none."""

    __getitems__ = None


class H5Rows(torch.utils.data.Dataset):
    """One HDF5 dataset's rows, one per call, the file opened in the process that reads it."""

    def __init__(self, path, key):
        self.path, self.key, self._rows = path, key, None
        with h5py.File(path) as f:
            self._len = len(f[key])

    def __len__(self):
        return self._len

    def __getitem__(self, i):
        if self._rows is None:
            self._rows = h5py.File(self.path)[self.key]
        return torch.from_numpy(self._rows[i])

    def __getstate__(self):
        return {**self.__dict__, "_rows": None}


def epochs_of_dataloader(ds, args):
    """One DataLoader epoch per call of the generator returned: a random order each time."""
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                     persistent_workers=args.workers > 0)
    while True:
        yield sum(1 for _ in dl)


def epochs_of_loader(dataset, args):
    loader = ddstage.torch.Loader(dataset, fields=[args.field], batch_size=args.batch, shuffle=True)
    for epoch in itertools.count():
        loader.set_epoch(epoch)
        yield sum(1 for _ in loader)


def methods(dataset, args):
    """name -> generator whose next() runs one epoch and returns its batch count."""
    fields = [args.field]
    out = {"DataLoader(StoreDataset), __getitems__": epochs_of_dataloader(
               ddstage.torch.StoreDataset(args.store, args.dataset, fields=fields), args),
           "DataLoader(StoreDataset), per sample": epochs_of_dataloader(
               PerSample(args.store, args.dataset, fields=fields), args),
           "ddstage.torch.Loader": epochs_of_loader(dataset, args)}
    if args.h5 and h5py is not None:
        out["DataLoader(h5py Dataset), per sample"] = epochs_of_dataloader(H5Rows(args.h5, args.h5_key), args)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", help="directory of a store started by `ddstage serve` (default: $DDSTAGE_STORE)")
    p.add_argument("--dataset", default="rows")
    p.add_argument("--field", default="x", help="the fixed-size field to read (default: x)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default: 0)")
    p.add_argument("--epochs", type=int, default=5, help="timed rounds (default: 5)")
    p.add_argument("--h5", help="the origin HDF5 file, for (d)")
    p.add_argument("--h5-key", default="features", help="its dataset of --field's rows (default: features)")
    args = p.parse_args()
    dataset = ddstage.Client(args.store).open(args.dataset)
    runs = methods(dataset, args)
    times = {name: [] for name in runs}
    for rnd in range(args.epochs + 1):
        for name, epochs in runs.items():
            start = time.perf_counter()
            next(epochs)
            if rnd:  # round 0 warms up: workers, readers, connections, the page cache
                times[name].append(time.perf_counter() - start)
    print(f"{dataset.samples} samples of {dataset.field(args.field).row_bytes} B ('{args.field}'), batch {args.batch}, "
          f"{args.workers} workers, {args.epochs} epochs: seconds per epoch")
    base = statistics.median(times["ddstage.torch.Loader"])
    for name, t in times.items():
        median = statistics.median(t)
        print(f"{name:40s} best {min(t):8.4f}  median {median:8.4f}  {median / base:6.2f}x Loader")
    ours = statistics.median(times["DataLoader(StoreDataset), __getitems__"])
    for name, t in times.items():
        if "per sample" in name:
            print(f"{name} / __getitems__: {statistics.median(t) / ours:.1f}x")


if __name__ == "__main__":
    main()
