"""One rank of test_ddp.py: a small DDP model (torch.distributed, gloo on loopback) trained
over ddstage.torch.Loader reading a served store, or with no store the index DATASET.ddx
itself (ddstage.open) when STORE is "-".

argv: STORE DATASET RANK WORLD PORT BATCH EPOCHS DROP_LAST(0/1) OUT.JSON. Writes, per epoch,
the steps this rank ran and the sample ids it read, and whether the model's weights ended
the same on every rank. Every collective has a 30 s timeout: a rank left waiting in
allreduce (unequal batch counts) fails instead of hanging."""
import datetime
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import ddstage
import ddstage.torch


def main(store, dataset, rank, world, port, batch, epochs, drop_last, out):
    rank, world, batch, epochs = int(rank), int(world), int(batch), int(epochs)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    opened = ddstage.open(dataset) if store == "-" else ddstage.Client(store).open(dataset)
    loader = ddstage.torch.Loader(opened, fields=["id", "v"], batch_size=batch,
                                  seed=3, rank=rank, world_size=world, drop_last=drop_last == "1")
    result = {"steps": [], "ids": []}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        ids, steps = [], 0
        for b in loader:
            loss = model(b["v"] / 4096).pow(2).mean()  # inputs scaled to keep the weights finite
            optimizer.zero_grad()
            loss.backward()  # DDP's allreduce: every rank must take this step
            optimizer.step()
            ids += b["id"].tolist()
            steps += 1
        result["steps"].append(steps)
        result["ids"].append(ids)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(everyone, weights)
    result["same_weights"] = all(torch.equal(w, weights) for w in everyone)
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
