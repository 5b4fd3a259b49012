"""ddstage's own loader: whole batches read by background threads, no worker processes."""
import queue
import threading
import warnings

import numpy as np
import torch

from .. import UsageError
from ._tensors import _checked_fields, _rows_to_tensors

# What an order depends on: a state saved with other values cannot resume in this loader.
_ORDER_KEYS = ("samples", "shuffle")
# What the batches of a run depend on besides the order: equal values resume exactly, others
# elastically (from the samples every rank together had consumed).
_SPLIT_KEYS = ("batch_size", "world_size", "drop_last")
_STATE_KEYS = ("seed", "epoch", "start", "position", "consumed", "sampler") + _ORDER_KEYS + _SPLIT_KEYS


class Loader:
    """Batches of a ddstage Dataset (Client.open() or Store.dataset()) as dicts of tensors.

    fields: names to read (default: every field). batch_size: samples per batch on this rank.
    shuffle (default True), seed (default 0): a global order per (seed, epoch), identical on
    every rank (set_epoch). rank, world_size (default 0 of 1): this rank's share, every
    world_size-th sample of the order. prefetch: batches read ahead of the consumer.
    threads: background reader threads. verify: check checksums.

    Every rank gets the same number of batches (what DDP needs): without drop_last the
    order is padded, as torch's DistributedSampler pads, with its own first samples
    repeated until its length divides by world_size (fewer than world_size repeats; the
    last ranks read them), so every sample is read once per epoch and those few twice;
    drop_last=True reads full batches only and skips the end of the epoch's order (fewer
    than world_size * (batch_size + 1) samples).

    sampler: a torch Sampler, or any sized iterable giving this rank's sample ids for an epoch
    (iterated once per epoch; set_epoch is passed on to it when it has one). The sampler
    decides the order and the rank's share: shuffle, seed, rank and world_size are refused
    with it; drop_last then drops the last batch when it is not full.

    Hooks, all run in the reader threads, so they overlap the consumer:
    collate_fn(rows) -> batch: rows is {field: what get_batch returns} (numpy arrays on the
    host; (values, offsets) for variable-length fields); default: the same as torch tensors
    (torch.from_numpy, no copy). transform(batch) -> batch: applied to every batch, after
    collate_fn. pin_memory=True: every tensor of the batch (dicts, lists and tuples are
    walked) in page-locked memory, for .to("cuda", non_blocking=True); without CUDA, a
    warning and unpinned tensors, as torch's DataLoader does. device (e.g. "cuda:0"): rows
    are read straight into tensors on that device (get_batch(out=tensor)); a UsageError when
    torch finds no such device; not with collate_fn or pin_memory.

    state_dict()/load_state_dict(): see load_state_dict. One iteration of a Loader at a time."""

    def __init__(self, dataset, fields=None, batch_size=64, shuffle=None, seed=None, rank=None,
                 world_size=None, prefetch=2, threads=1, drop_last=False, verify=False, sampler=None,
                 collate_fn=None, transform=None, pin_memory=False, device=None):
        if sampler is not None:
            given = [f"{k}={v}" for k, v in (("shuffle", shuffle), ("seed", seed), ("rank", rank),
                                              ("world_size", world_size)) if v is not None]
            if given:
                raise UsageError(f"sampler decides the order and this rank's share: "
                                 f"{', '.join(given)} does not apply with it")
            # Every rank must know its batch count before reading (equal steps under DDP).
            if not hasattr(sampler, "__len__"):
                raise UsageError(f"sampler {type(sampler).__name__} has no len(): pass a sized "
                                 f"iterable of this rank's ids (a Sampler with __len__, a list, an array)")
        shuffle, seed = True if shuffle is None else shuffle, 0 if seed is None else seed
        rank, world_size = 0 if rank is None else rank, 1 if world_size is None else world_size
        for name, value, least in (("batch_size", batch_size, 1), ("world_size", world_size, 1),
                                   ("prefetch", prefetch, 1), ("threads", threads, 1)):
            if int(value) < least:
                raise UsageError(f"{name} must be at least {least}, not {value}")
        if not 0 <= rank < world_size:
            raise UsageError(f"rank {rank} is not in 0..{world_size - 1}")
        self.dataset = dataset
        self.fields = _checked_fields(dataset, fields)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.prefetch = int(prefetch)
        self.threads = int(threads)
        self.drop_last = bool(drop_last)
        self.verify = bool(verify)
        self.sampler = sampler
        self.collate_fn = collate_fn
        self.transform = transform
        self.device = _device(device, self.fields, collate_fn, pin_memory)
        self.pin_memory = bool(pin_memory) and _can_pin()
        self._epoch = 0
        self._start = 0      # samples of the epoch's order consumed before this run of it
        self._position = 0   # batches of this run yielded
        self._resumed = False

    @property
    def epoch(self):
        """The epoch set_epoch selected (0 at first)."""
        return self._epoch

    def set_epoch(self, epoch):
        """Selects the epoch's order (and calls the sampler's set_epoch, if it has one).
        Setting the current epoch again keeps the position, so load_state_dict() then
        set_epoch(saved epoch) resumes where the state was saved."""
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        if int(epoch) != self._epoch:
            self._epoch = int(epoch)
            self._start = self._position = 0
            self._resumed = False

    def _left(self):
        """Samples of the epoch's order this run reads from (all ranks together)."""
        return max(self.dataset.samples - self._start, 0)

    def _share(self):
        """How many samples of this run each rank reads (padded, or dropped to a multiple)."""
        left, w = self._left(), self.world_size
        return left // w if self.drop_last else -(-left // w)

    def __len__(self):
        """Batches of this run of the epoch, the same on every rank."""
        share = len(self.sampler) if self.sampler is not None else self._share()
        return share // self.batch_size if self.drop_last else -(-share // self.batch_size)

    def indices(self):
        """This rank's sample ids for this run of the epoch, in reading order (int64),
        repeats of the padding included."""
        if self.sampler is not None:
            ids = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            return ids[:len(ids) // self.batch_size * self.batch_size] if self.drop_last else ids
        n = self.dataset.samples
        if self.shuffle:
            order = np.random.Generator(np.random.PCG64([self.seed, self._epoch])).permutation(n)
        else:
            order = np.arange(n, dtype=np.int64)
        left = order[self._start:]
        # np.resize repeats from the start, as DistributedSampler pads, even past len(left).
        padded = np.resize(left, self._share() * self.world_size)
        mine = padded[self.rank::self.world_size]
        return np.ascontiguousarray(mine[:len(self) * self.batch_size], dtype=np.int64)

    def state_dict(self):
        """Where this loader is: seed, epoch, the batches of the epoch already yielded, and
        the samples of the epoch's order that every rank together has consumed, if every
        rank has yielded as many batches as this one (as DDP's steps in step make sure)."""
        done = self._position >= len(self)
        b, w = self.batch_size, self.world_size
        consumed = self.dataset.samples if done else self._start + min(self._position * b * w, self._left())
        return {"seed": self.seed, "epoch": self._epoch, "start": self._start, "position": self._position,
                "consumed": consumed, "sampler": self.sampler is not None, "samples": self.dataset.samples,
                "shuffle": self.shuffle, "batch_size": b, "world_size": w, "drop_last": self.drop_last}

    def load_state_dict(self, state):
        """Resumes from a state_dict() of a loader of the same dataset size and shuffle (any
        rank's state: ranks in step hold the same), then set_epoch(state["epoch"]) keeps it.

        With the same batch_size, world_size and drop_last it resumes exactly: the next
        iteration yields the batches that epoch had not yielded yet. Otherwise (another world
        size, say) elastically: the samples of the epoch's order not yet consumed by the
        ranks together are split over the new ranks as an epoch of their own (padded or
        dropped as above), so each of them is read exactly once by the union of the new
        ranks, and the padding's repeats are of those samples. A loader with a sampler does
        not resume (the sampler's order is its own): UsageError."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise UsageError(f"the state has no {', '.join(missing)}: not a ddstage.torch.Loader state")
        if state["sampler"] or self.sampler is not None:
            raise UsageError("a Loader with a sampler cannot resume from a state: the sampler's order is "
                             "its own (Loader's own shuffle, rank and world_size resume)")
        ours = self.state_dict()
        for key in _ORDER_KEYS:
            if state[key] != ours[key]:
                raise UsageError(f"the state was saved with {key}={state[key]}; this loader has {ours[key]}")
        self.seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        if all(state[k] == ours[k] for k in _SPLIT_KEYS):
            self._start, self._position = int(state["start"]), int(state["position"])
        else:
            self._start, self._position = int(state["consumed"]), 0
        self._resumed = True

    def __iter__(self):
        """This rank's batches of the epoch, from the position (a resumed one: what was left)."""
        # Iterating a finished epoch again reads all of it again, as torch's DataLoader does;
        # a resumed one yields what was left of it, even nothing.
        if self._position >= len(self) and not self._resumed:
            self._start = self._position = 0
        self._resumed = False
        ids = self.indices()
        b = self.batch_size
        batches = [ids[i * b:(i + 1) * b] for i in range(self._position, -(-len(ids) // b))]
        workers = _Workers(self, batches)
        try:
            for batch in workers:
                self._position += 1
                yield batch
        finally:
            workers.stop()

    def _read(self, reader, ids):
        if self.device is not None:
            batch = {name: _read_to_device(reader, name, field, ids, self.device, self.verify)
                     for name, field in self.fields.items()}
        else:
            rows = {name: reader.get_batch(name, ids, verify=self.verify) for name in self.fields}
            if self.collate_fn is not None:
                batch = self.collate_fn(rows)
            else:
                batch = {name: _rows_to_tensors(rows[name], field) for name, field in self.fields.items()}
        if self.transform is not None:
            batch = self.transform(batch)
        return _pinned(batch) if self.pin_memory else batch


def _torch_dtype(field):
    """The torch dtype of a field's elements, None where torch has none (uint16/32/64)."""
    try:
        return torch.from_numpy(np.empty(0, field.dtype)).dtype
    except TypeError:
        return None


def _device(device, fields, collate_fn, pin_memory):
    """The torch device rows are read into, or None for host arrays; UsageError when torch
    has no such device or another argument contradicts it."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise UsageError(f"device={device!r} is not a torch device: {e}") from None
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise UsageError(f"device={device!r}: ddstage reads into host memory or a CUDA device only")
    if not torch.cuda.is_available():
        raise UsageError(f"device={device!r}: torch finds no CUDA device here "
                         f"(torch.cuda.is_available() is False)")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"device={device!r}: torch finds {torch.cuda.device_count()} CUDA "
                         f"device(s) here")
    if collate_fn is not None or pin_memory:
        raise UsageError(f"device={device!r} reads into device tensors: collate_fn (host arrays) and "
                         f"pin_memory do not apply; use transform")
    for name, field in fields.items():
        if _torch_dtype(field) is None:
            raise UsageError(f"device={device!r}: field '{name}' is {field.dtype}, which this torch has "
                             f"no tensor type for; read it to the host (no device) to get it widened")
    return dev


def _can_pin():
    if torch.cuda.is_available():
        return True
    warnings.warn("pin_memory=True but torch finds no CUDA device: batches stay in pageable memory",
                  stacklevel=3)
    return False


def _pinned(batch):
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return {k: _pinned(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_pinned(v) for v in batch)
    return batch


def _read_to_device(reader, name, field, ids, device, verify):
    """One field's rows read into a new tensor on device (values and host offsets for a
    variable-length field)."""
    dtype = _torch_dtype(field)
    if field.variable:
        rows = int(reader.batch_bytes(name, ids)) // (np.dtype(field.dtype).itemsize
                                                      * int(np.prod(field.shape)))
    else:
        rows = len(ids)
    out = torch.empty((rows, *field.shape), dtype=dtype, device=device)
    # torch gives bool tensors no __cuda_array_interface__: the same bytes as uint8.
    result = reader.get_batch(name, ids, out=out.view(torch.uint8) if dtype == torch.bool else out,
                              verify=verify)
    return (out, torch.from_numpy(result[1])) if field.variable else out


class _Workers:
    """Reader threads: batch i is read by thread i % threads, and the consumer takes them in
    order. A thread reads a batch only after claiming one of its slots (a token in a queue),
    which the consumer frees as it takes batches: prefetch bounds the batches held ahead.
    Tokens in a SimpleQueue rather than a Semaphore: its put and get are C, and the consumer
    pays for one of each per batch."""

    _POLL_S = 0.1  # how soon a thread waiting for a slot notices stop()

    def __init__(self, loader, batches):
        self._loader = loader
        self._batches = batches
        n = loader.threads
        depth = max(1, -(-loader.prefetch // n))
        self._queues = [queue.SimpleQueue() for _ in range(n)]
        self._slots = [queue.SimpleQueue() for _ in range(n)]
        for slots in self._slots:
            for _ in range(depth):
                slots.put(None)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,), name=f"ddstage-loader-{w}",
                                          daemon=True) for w in range(n)]
        for t in self._threads:
            t.start()

    def _run(self, w):
        try:
            reader = self._loader.dataset.reader()
            for i in range(w, len(self._batches), len(self._threads)):
                if not self._claim(w):
                    return
                self._queues[w].put((self._loader._read(reader, self._batches[i]), None))
        except BaseException as e:  # handed to the consumer, raised there
            self._queues[w].put((None, e))

    def _claim(self, w):
        while not self._stop.is_set():
            try:
                self._slots[w].get(timeout=self._POLL_S)
                return True
            except queue.Empty:
                pass
        return False

    def __iter__(self):
        for i in range(len(self._batches)):
            w = i % len(self._queues)
            batch, error = self._queues[w].get()
            self._slots[w].put(None)
            if error is not None:
                raise error
            yield batch

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join()
