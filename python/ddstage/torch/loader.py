"""ddstage's own loader: whole batches read by background threads, no worker processes."""
import queue
import threading

import numpy as np

from .. import UsageError
from ._tensors import _checked_fields, _rows_to_tensors

class Loader:
    """Batches of a ddstage Dataset (Client.open() or Store.dataset()) as dicts of tensors.

    fields: names to read (default: every field). batch_size: samples per batch on this rank.
    shuffle, seed: a global order per (seed, epoch), identical on every rank (set_epoch).
    rank, world_size: this rank's share, every world_size-th sample of the order.
    prefetch: batches read ahead of the consumer. threads: background reader threads.
    drop_last: only full batches, and the same number on every rank. verify: check checksums.

    state_dict()/load_state_dict() resume exactly: the next iteration yields the batches this
    epoch had not yielded yet. One iteration of a Loader at a time."""

    def __init__(self, dataset, fields=None, batch_size=64, shuffle=True, seed=0, rank=0,
                 world_size=1, prefetch=2, threads=1, drop_last=False, verify=False):
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
        self._epoch = 0
        self._position = 0

    @property
    def epoch(self):
        return self._epoch

    def set_epoch(self, epoch):
        """Selects the epoch's order. Setting the current epoch again keeps the position, so
        load_state_dict() then set_epoch(saved epoch) resumes where the state was saved."""
        if int(epoch) != self._epoch:
            self._epoch = int(epoch)
            self._position = 0

    def _share(self):
        """How many samples of an epoch this rank reads."""
        n, w = self.dataset.samples, self.world_size
        if self.drop_last:
            return n // w
        return len(range(self.rank, n, w))

    def __len__(self):
        share = self._share()
        if self.drop_last:
            return share // self.batch_size
        return -(-share // self.batch_size)

    def indices(self):
        """This rank's sample ids for the current epoch, in reading order (int64)."""
        n = self.dataset.samples
        if self.shuffle:
            order = np.random.Generator(np.random.PCG64([self.seed, self._epoch])).permutation(n)
        else:
            order = np.arange(n, dtype=np.int64)
        mine = order[self.rank::self.world_size][:self._share()]
        return np.ascontiguousarray(mine[:len(self) * self.batch_size], dtype=np.int64)

    def state_dict(self):
        """Where this loader is: seed, epoch and the batches of the epoch already yielded, with
        what the order depends on (checked by load_state_dict)."""
        return {"seed": self.seed, "epoch": self._epoch, "position": self._position,
                "batch_size": self.batch_size, "world_size": self.world_size, "rank": self.rank,
                "shuffle": self.shuffle, "drop_last": self.drop_last, "samples": self.dataset.samples}

    def load_state_dict(self, state):
        for key in ("batch_size", "world_size", "rank", "shuffle", "drop_last", "samples"):
            ours = self.state_dict()[key]
            if state[key] != ours:
                raise UsageError(f"the state was saved with {key}={state[key]}; this loader has {ours}")
        self.seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])

    def __iter__(self):
        ids = self.indices()
        total = len(self)
        # Iterating a finished epoch again reads it again, as torch's DataLoader does.
        if self._position >= total:
            self._position = 0
        b = self.batch_size
        batches = [ids[i * b:(i + 1) * b] for i in range(self._position, total)]
        workers = _Workers(self, batches)
        try:
            for batch in workers:
                self._position += 1
                yield batch
        finally:
            workers.stop()

    def _read(self, reader, ids):
        return {name: _rows_to_tensors(reader.get_batch(name, ids, verify=self.verify), field)
                for name, field in self.fields.items()}


class _Workers:
    """Reader threads: batch i is read by thread i % threads, and the consumer takes them in
    order. A thread reads a batch only after claiming one of its slots, which the consumer
    frees as it takes batches: prefetch bounds the batches held ahead."""

    _POLL_S = 0.1  # how soon a thread waiting for a slot notices stop()

    def __init__(self, loader, batches):
        self._loader = loader
        self._batches = batches
        n = loader.threads
        depth = max(1, -(-loader.prefetch // n))
        self._queues = [queue.SimpleQueue() for _ in range(n)]
        self._slots = [threading.Semaphore(depth) for _ in range(n)]
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
            if self._slots[w].acquire(timeout=self._POLL_S):
                return True
        return False

    def __iter__(self):
        for i in range(len(self._batches)):
            w = i % len(self._queues)
            batch, error = self._queues[w].get()
            self._slots[w].release()
            if error is not None:
                raise error
            yield batch

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join()
