"""PyTorch input from a ddstage dataset, two ways.

ddstage's own Loader, the fast path: background threads, no worker processes.

    train = ddstage.Client().open("train")        # the store in $DDSTAGE_STORE
    loader = ddstage.torch.Loader(train, fields=["x", "y"], batch_size=64, seed=1,
                                  rank=rank, world_size=world)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:          # {"x": tensor (64, *shape), "y": tensor (64,)}
            ...

torch's DataLoader, with its worker processes and samplers:

    ds = ddstage.torch.StoreDataset(None, "train", fields=("x", "y"))   # None: $DDSTAGE_STORE
    dl = torch.utils.data.DataLoader(ds, batch_size=256, sampler=DistributedSampler(ds),
                                     num_workers=4, multiprocessing_context="spawn")

StoreDataset pickles as names only (store directory, dataset, fields) and opens its own
Client in each process that uses it, so workers of any start method (fork, spawn,
forkserver) read over shared memory and libfabric alike. DataLoader calls its __getitems__
(one get_batch per field per batch), and the default collate_fn passes that batch through
as read (Samples), pin_memory included. Dataset(an open dataset) reads the same way but
cannot be pickled: in-process or forked workers only.

Loader reads whole batches in background threads, each with its own ddstage reader (libcore
releases the GIL while it copies), straight into the arrays that become the batch's tensors
(torch.from_numpy: no copy): a thread is enough to hide the fetch.

Sampling: one global order per (seed, epoch), numpy's PCG64 seeded with [seed, epoch], the
same on every rank; rank r takes every world_size-th sample of it starting at r. Every rank
gets the same number of batches, so DDP's allreduce never waits on a rank that ran out:
by default the order is padded, as torch's DistributedSampler pads, by repeating its first
(-samples % world_size) samples at its end (the last ranks read them a second time);
drop_last=True reads full batches only and skips the end of the order that epoch. Or pass
sampler= (a torch Sampler, e.g. DistributedSampler, or any sized iterable of this rank's ids).

Hooks run in the reader threads: collate_fn (host arrays -> batch), transform (batch ->
batch), pin_memory; device="cuda:N" reads rows straight into tensors on that GPU.
state_dict()/load_state_dict() resume exactly at the same world size and elastically at
another: the samples of the epoch the ranks together had not read, each exactly once.

Variable-length fields come as (values, offsets) tensor pairs (see ddstage.get_batch).
torch 1.13 has no uint16/uint32/uint64 tensors: those fields widen to int32/int64 (a copy;
uint64 values of 2**63 and more wrap).
"""
from .dataset import Dataset, Samples, StoreDataset
from .loader import Loader

__all__ = ["Dataset", "Loader", "Samples", "StoreDataset"]
