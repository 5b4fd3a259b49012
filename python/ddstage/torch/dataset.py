"""Map-style torch Datasets over a ddstage dataset, for torch's DataLoader.

Both read a whole batch per DataLoader call (__getitems__: one get_batch per field, the rows
straight into the batch's tensors) and hand it to the DataLoader as Samples, which torch's
default collate_fn returns as read instead of stacking it again sample by sample."""
import os

import numpy as np
import torch.utils.data
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from .. import Client, OriginDataset, UsageError, _inherited, _setting_texts
from ._tensors import _batch_tensors, _checked_fields, _tensor


class Samples:
    """A batch read whole, as __getitems__ returns it: `batch`, {field: tensor of the rows} (a
    variable-length field: (values, offsets), row i being values[offsets[i]:offsets[i + 1]]).

    To torch's collate_fn it is the sequence of its samples, sample i being {field: row i}
    (views, no copy). DataLoader's default collate_fn returns `batch` itself: Samples registers
    with default_collate_fn_map (torch >= 1.13), so no row is stacked again; pin_memory=True
    pins its tensors (the (values, offsets) pair then comes as a list, as torch pins tuples).
    A collate_fn of your own gets the Samples and may take `.batch` or the samples."""

    __slots__ = ("batch", "_rows")

    def __init__(self, batch, rows):
        self.batch = batch
        self._rows = rows

    def __len__(self):
        return self._rows

    def __getitem__(self, i):
        if not -self._rows <= i < self._rows:
            raise IndexError(f"sample {i} of a batch of {self._rows}")
        i %= self._rows
        return _Sample({name: rows[i] if torch.is_tensor(rows) else rows[0][rows[1][i]:rows[1][i + 1]]
                        for name, rows in self.batch.items()})


class _Sample(dict):
    """A sample of Samples: its type tells default_collate that the batch is already collated."""


def _collate(samples, *, collate_fn_map=None):
    if isinstance(samples, Samples):
        return samples.batch
    # Samples taken apart into a list of their samples: collated as plain dicts.
    return collate([dict(s) for s in samples], collate_fn_map=collate_fn_map)


default_collate_fn_map[_Sample] = _collate


class _Rows(torch.utils.data.Dataset):
    """What Dataset and StoreDataset share: samples and batches of the ddstage dataset that
    their _open() gives as (ddstage.Dataset, {field name: FieldInfo}) in this process."""

    def __len__(self):
        return self._open()[0].samples

    def _ids(self, indices):
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if ids.size and ids.min() < 0:
            ids = np.where(ids < 0, ids + len(self), ids)
        return ids

    def __getitem__(self, i):
        dataset, fields = self._open()
        ids = self._ids([int(i)])
        sample = {}
        for name, field in fields.items():
            rows = dataset.get_batch(name, ids, verify=self.verify)
            # A batch of one: all the values of a variable one; the one row of a fixed one, as
            # an array even for scalars (torch.from_numpy takes no numpy scalar).
            sample[name] = _tensor(rows[0] if field.variable else rows.reshape(rows.shape[1:]))
        return sample

    def __getitems__(self, indices):
        """The samples of indices read as one batch (see Samples): what DataLoader calls."""
        dataset, fields = self._open()
        ids = self._ids(indices)
        return Samples(_batch_tensors(dataset.get_batch, fields, ids, self.verify), len(ids))


class Dataset(_Rows):
    """Map-style over an open dataset (Client.open() or Store.dataset()): dataset[i] is one
    sample, {field: tensor of the field's row shape} (a variable-length field: its row, the
    length of the first axis varying); DataLoader reads whole batches (__getitems__, Samples).

    Over a store's dataset it holds the open dataset and cannot be pickled (UsageError): it
    goes to DataLoader workers only when they are forked (multiprocessing_context "fork",
    Linux's default), and then reads through readers of each worker's own. For spawn or
    forkserver workers, and for fabric providers that want the Client opened after the fork
    (cxi, verbs), use StoreDataset. Over ddstage.open()'s OriginDataset it pickles (the index is
    opened again in each worker), so workers of every start method take it."""

    def __init__(self, dataset, fields=None, verify=False):
        self.dataset = dataset
        self.fields = _checked_fields(dataset, fields)
        self.verify = verify

    def _open(self):
        return self.dataset, self.fields

    def __getstate__(self):
        if isinstance(self.dataset, OriginDataset):
            return {"dataset": self.dataset, "fields": list(self.fields), "verify": self.verify}
        raise UsageError("ddstage.torch.Dataset holds an open dataset and cannot be pickled (as for spawn "
                         "or forkserver DataLoader workers): use ddstage.torch.StoreDataset(store, name)")

    def __setstate__(self, state):
        self.__init__(**state)


class StoreDataset(_Rows):
    """Map-style over a dataset of a running store, for DataLoader worker processes of any
    start method (fork, spawn, forkserver), over shared memory and libfabric alike:

        ds = StoreDataset(os.environ["DDSTAGE_STORE"], "train", fields=("x", "y"))
        dl = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=4,
                                         multiprocessing_context="spawn", pin_memory=True)

    store: the store directory; None takes the setting `store` ($DDSTAGE_STORE), as Client.
    dataset: the dataset's name. fields: names to read (default: every field). settings:
    setting key -> value, as for Client. verify: check every row's checksum.

    It pickles as (store, dataset, fields, settings, verify) only. Each process opens its own
    Client and dataset on first use, and again when it finds itself in a forked child, so a
    worker never reads through its parent's Client, reader or fabric endpoint (what the parent
    opened stays untouched there). The parent opens it on construction: an unknown dataset or
    field is a UsageError here rather than in a worker. Items and batches as Dataset's."""

    def __init__(self, store, dataset, fields=None, settings=None, verify=False):
        self.store = None if store is None else os.fspath(store)
        self.name = dataset
        self.settings = _setting_texts(settings)
        self.verify = bool(verify)
        self.fields = None if fields is None else tuple(fields)
        self._pid = self._client = self._opened = None
        self.fields = tuple(self._open()[1])  # None: every field, by name

    def _open(self):
        if self._pid != os.getpid():
            if self._client is not None:  # the parent's, inherited through fork
                _inherited.append((self._client, self._opened))
            self._client = Client(self.store, self.settings)
            dataset = self._client.open(self.name)
            self._opened = dataset, _checked_fields(dataset, self.fields)
            self._pid = os.getpid()
        return self._opened

    def __getstate__(self):
        return {"store": self.store, "name": self.name, "fields": self.fields,
                "settings": self.settings, "verify": self.verify}

    def __setstate__(self, state):
        self.__dict__.update(state, _pid=None, _client=None, _opened=None)

    def __repr__(self):
        return f"ddstage.torch.StoreDataset({self.store!r}, {self.name!r}, fields={list(self.fields)})"
