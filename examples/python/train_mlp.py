#!/usr/bin/env python3
"""Trains a small MLP (CPU) on the demo dataset through ddstage: x (28x28 float32), y (0-9).

A store started by `ddstage serve` (scripts/demo shows the flow: flatten, serve, load):
    python3 train_mlp.py --store DIR [--dataset train]
An embedded store: every MPI rank holds a shard and trains on its share; gradients are
averaged with mpi4py:
    mpiexec -n 2 python3 train_mlp.py --embedded train.ddx

The demo's labels are random: the loss falls only as the network memorises its samples.
"""
import argparse
import time

import numpy as np
import torch
from torch import nn

import ddstage
import ddstage.torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", help="directory of a store started by `ddstage serve`")
    where.add_argument("--embedded", metavar="INDEX", help="DATASET.ddx to load into an embedded store (mpiexec)")
    p.add_argument("--dataset", default="train", help="dataset name in the served store (default: train)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-batches", type=int, default=0, help="stop each epoch after N batches (0: all)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def average_gradients(model, comm):
    from mpi4py import MPI
    for param in model.parameters():
        grad = param.grad.numpy()
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        grad /= comm.size


def train(dataset, args, rank=0, world=1, comm=None):
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    features = int(np.prod(dataset.field("x").shape))
    model = nn.Sequential(nn.Flatten(), nn.Linear(features, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Every rank runs the same number of steps (the default pads; drop_last reads full batches
    # only), so the gradient averages match up.
    loader = ddstage.torch.Loader(dataset, fields=["x", "y"], batch_size=args.batch_size, shuffle=True,
                                  seed=args.seed, rank=rank, world_size=world, prefetch=2, threads=1,
                                  drop_last=True)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        start, losses, correct, seen = time.perf_counter(), [], 0, 0
        for step, batch in enumerate(loader):
            if args.max_batches and step == args.max_batches:
                break
            logits = model(batch["x"])
            loss = nn.functional.cross_entropy(logits, batch["y"])
            optimizer.zero_grad()
            loss.backward()
            if world > 1:
                average_gradients(model, comm)
            optimizer.step()
            losses.append(loss.item())
            correct += int((logits.argmax(1) == batch["y"]).sum())
            seen += len(batch["y"])
        if rank == 0:
            rate = seen * world / (time.perf_counter() - start)
            print(f"epoch {epoch}: loss {np.mean(losses):.4f}, accuracy {correct / max(seen, 1):.3f}, "
                  f"{rate:.0f} samples/s over {world} rank(s)", flush=True)


def main():
    args = parse_args()
    torch.set_num_threads(1)  # ranks share the node's cores
    if args.store:
        train(ddstage.Client(args.store).open(args.dataset), args)
        return
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with ddstage.Store(comm) as store:
        name = store.load(args.embedded)
        train(store.dataset(name), args, comm.rank, comm.size, comm)


if __name__ == "__main__":
    main()
