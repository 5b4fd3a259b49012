"""PyTorch input from a ddstage dataset, without forked worker processes.

    loader = ddstage.torch.Loader(train, fields=["x", "y"], batch_size=64, shuffle=True, seed=1,
                                  rank=rank, world_size=world, prefetch=2, threads=1)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:          # {"x": tensor (64, *shape), "y": tensor (64,)}
            ...

Loader reads whole batches in background threads, each with its own ddstage reader (libcore
releases the GIL while it copies), straight into the arrays that become the batch's tensors
(torch.from_numpy: no copy). Forked DataLoader workers would add seconds per epoch and break
some fabric settings; a thread is enough to hide the fetch.

Sampling: one global order per (seed, epoch), numpy's PCG64 seeded with [seed, epoch], the
same on every rank; rank r takes every world_size-th sample of it starting at r. Without
drop_last every sample is read exactly once per epoch and ranks' batch counts differ by at
most one; with drop_last every rank gets the same number of full batches (what DDP needs)
and the few samples left over are skipped that epoch.

Variable-length fields come as (values, offsets) tensor pairs (see ddstage.get_batch).
torch 1.13 has no uint16/uint32/uint64 tensors: those fields widen to int32/int64 (a copy;
uint64 values of 2**63 and more wrap).
"""
from .dataset import Dataset, Samples, StoreDataset
from .loader import Loader

__all__ = ["Dataset", "Loader", "Samples", "StoreDataset"]
