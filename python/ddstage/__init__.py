"""ddstage from Python: read batches of samples from a ddstage store into numpy arrays.

    import ddstage
    train = ddstage.Client("/scratch/store").open("train")   # a store started by `ddstage serve`
                                                              # (Client() alone: $DDSTAGE_STORE)
    x = train.get_batch("x", [5, 99, 1000])                   # array (3, *shape of x)

Before there is a store (a notebook, a first run), ddstage.open("train.ddx") reads the same
dataset straight from its origin files through the index, with the same Dataset API: moving to
a store changes only that line. Every such read goes to the file system the sources are on.

Fixed-size fields come back as one array of shape (len(ids), *field shape) in the field's
dtype, read straight into it by libcore with the GIL released. Variable-length fields come
back as (data, offsets): data of shape (total, *element shape), offsets int64 of
len(ids) + 1, row i being data[offsets[i]:offsets[i + 1]] (split_rows() makes a list).
Pass out= to read into an array you own (C-contiguous, writable, exactly the batch's bytes).

Errors are ddstage.Error (a RuntimeError); errors in the caller's input (unknown dataset or
field, bad ids, a wrong out=) are ddstage.UsageError, also a ValueError; a checksum mismatch
with verify=True is ddstage.ChecksumError. The message is libcore's.

Without verify=True no byte is checked: bit rot, or an origin file edited in place keeping
its size and mtime, is returned silently. A dataset replaced by `ddstage load --replace`
after it was opened makes every get_batch raise ddstage.Error ("dataset 'X' was replaced
...; reopen it"), over shared memory and libfabric alike: Client.open() it again. It is never
reopened behind the caller's back: the new load may hold other samples than the sampler
was built for.

Readers are per thread: a Dataset keeps one reader per thread that uses it, and a thread
that wants its own explicitly takes dataset.reader(). They are per process too: in a child made
by fork a Dataset reads through new readers, never the parent's (whose fabric endpoint the parent
still uses). A reader taken with dataset.reader() must not cross a fork; and where the fabric
provider asks for it (cxi, verbs: ddstage-fabric(7)) open the Client itself after the fork, as
ddstage.torch.StoreDataset does in each DataLoader worker.

An MPI job can hold the data itself:
ddstage.Store(comm) (when ddstage was built with MPI; mpi4py provides comm).
"""
import atexit
import itertools
import os
import threading
import weakref

from . import _ddstage
from ._ddstage import ChecksumError, Error, FieldInfo, UsageError, __version__
from ._ddstage import profile_enable, profile_report, profile_reset, profile_snapshot

HAVE_MPI = _ddstage.HAVE_MPI

# open() is left out: `from ddstage import *` must not shadow the builtin open.
__all__ = ["Client", "Dataset", "OriginDataset", "Store", "Error", "UsageError", "ChecksumError", "FieldInfo",
           "split_rows", "HAVE_MPI", "__version__", "profile_enable", "profile_report", "profile_reset",
           "profile_snapshot"]


def _setting_texts(settings):
    """Settings as libcore reads them: text, a Python bool as true/false."""
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (settings or {}).items()}


def split_rows(data, offsets):
    """The rows of a variable-length batch (data, offsets) as a list of views of data."""
    return [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


class Dataset:
    """A dataset, from Client.open(), Store.dataset() or ddstage.open(): its fields and batched
    reads.

    get_batch/row_sizes/batch_bytes use a reader of the calling thread, created on first use;
    reader() gives a thread one of its own to keep."""

    def __init__(self, name, samples, fields, new_reader):
        self.name = name
        self.samples = samples
        self.fields = {f.name: f for f in fields}
        self._new_reader = new_reader
        self._local = threading.local()

    def __len__(self):
        return self.samples

    def __repr__(self):
        return f"ddstage.Dataset({self.name!r}, samples={self.samples}, fields={list(self.fields)})"

    def field(self, name):
        """FieldInfo of a field (UsageError listing the fields when there is none)."""
        try:
            return self.fields[name]
        except KeyError:
            raise UsageError(f"no field '{name}' in dataset '{self.name}' (fields: "
                             f"{', '.join(self.fields)})") from None

    def reader(self):
        """A new reader: get_batch, row_sizes, batch_bytes; for one thread at a time."""
        return self._new_reader()

    def _reader(self):
        local = self._local
        if getattr(local, "process", None) is not _process:  # none yet, or the parent's
            local.reader, local.process = self._new_reader(), _process
            _thread_readers.add(local.reader)
        return local.reader

    def get_batch(self, field, ids, out=None, verify=False):
        """Rows of field for ids (any order, repeats allowed), in the order asked: an array for
        fixed-size rows, (data, offsets) for variable ones.

        out: where the rows go, returned (for variable rows, with host offsets): a numpy
        array, or device memory with a __cuda_array_interface__ (a torch CUDA tensor, CuPy,
        Numba: `out=torch.empty((len(ids), *shape), dtype=..., device="cuda:0")`). Either must
        be C-contiguous, writable and exactly the batch's bytes (any dtype; batch_bytes() sizes
        variable rows), else UsageError. Device memory is read by libcore's device path
        (gpu.path: staged through pinned host memory, or direct from shared memory) with the
        GIL released, its copies queued on the interface's stream (none, as torch 1.13 gives:
        the legacy default stream, which waits for work on blocking streams), and the rows are
        in place on return: one synchronisation per batch. ddstage.Error "out is device memory
        (__cuda_array_interface__), but no GPU: <why>" without CUDA/HIP in this build or without
        a device. torch gives no interface for bool or bfloat16 tensors: pass out.view(torch.uint8).

        verify=True checks every row's checksum against the index (ChecksumError naming the
        sample). Without it rows are not checked: bit rot, or a source edited in place keeping
        its size and mtime, comes back silently. ddstage.Error "dataset 'X' was replaced ...;
        reopen it" when `ddstage load --replace` replaced the dataset after it was opened."""
        return self._reader().get_batch(field, ids, out=out, verify=verify)

    def row_sizes(self, field, ids):
        """Bytes of each id's row of field (uint64 array)."""
        return self._reader().row_sizes(field, ids)

    def batch_bytes(self, field, ids):
        """Total bytes of field for ids, repeats counted."""
        return self._reader().batch_bytes(field, ids)


# Which process this is: a forked child gets a new one, cheaper to compare per get_batch than
# os.getpid(). A forked child inherits the reader of the thread that forked, with its libfabric
# endpoint, whose sockets the parent still uses: reading through it from the child breaks the
# connection for both (tcp;ofi_rxm: "Transport endpoint is not connected"). So each process
# reads through readers it made itself.
_process = object()
# Every Dataset's thread-local reader in this process.
_thread_readers = weakref.WeakSet()
# What a forked child inherited and must neither use nor destroy: closing an endpoint or
# deregistering memory there would act on resources the parent still uses (verbs, cxi). Held
# from before the fork, as CPython clears the other threads' thread-locals in the child before
# any after-fork hook runs. multiprocessing's fork children leave through os._exit, so this is
# never torn down there.
_inherited = []


def _before_fork():
    _inherited.append(list(_thread_readers))


def _after_fork_in_child():
    global _process
    _process = object()
    _thread_readers.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_inherited.pop, after_in_child=_after_fork_in_child)


class Client:
    """A client of a store started by `ddstage serve --store DIR`: same-node ranks are read
    through shared memory, other nodes' over libfabric; no MPI needed. UsageError when DIR
    holds no running store, or when DIR or DIR/store.yaml is not the caller's own (owned by
    another uid, writable by group or others, or a symbolic link): see ddstage-serve(1).

    store: the store directory; None (the default) takes the setting `store`, i.e.
    $DDSTAGE_STORE as a job script exports it (or settings={"store": DIR}), and is a
    UsageError when that is not set either.
    settings: setting key -> value (ddstage-settings(7)), e.g. {"transport": "fabric",
    "read_timeout": "5s"}, over the DDSTAGE_* environment and the user's config file."""

    def __init__(self, store=None, settings=None):
        self._client = _ddstage.Client(None if store is None else os.fspath(store),
                                       _setting_texts(settings))

    def open(self, name):
        """A loaded dataset by name (UsageError listing the loaded ones when there is none).
        During `ddstage load --replace` it waits for the new shards up to read_timeout, then
        raises ddstage.Error "dataset 'X' is being replaced"."""
        ds = self._client.open(name)
        return Dataset(ds.name, ds.samples, ds.fields, ds.reader)


class OriginDataset(Dataset):
    """A flattened dataset (DATASET.ddx) read straight from its origin files, no store: each
    batch one sorted run of preads through the index, adjacent rows coalesced. ddstage.open()
    makes one. It pickles as (path, settings) and opens the index again where it is unpickled,
    so it goes to DataLoader workers of any start method (ddstage.torch.Dataset(it)).

    settings: setting key -> value, as for Client: origin.allow_stale (read sources whose size
    or time changed since flattening, otherwise an Error naming the file), gpu.path (device
    memory is always staged through pinned host memory here). An index that is not one, or is
    damaged, is a UsageError or Error naming it, at once."""

    def __init__(self, path, settings=None):
        self.path = os.fspath(path)
        self.settings = _setting_texts(settings)
        ds = _ddstage.OriginDataset(self.path, self.settings)
        super().__init__(ds.name, ds.samples, ds.fields, ds.reader)

    def __reduce__(self):
        return OriginDataset, (self.path, self.settings)

    def __repr__(self):
        return f"ddstage.OriginDataset({self.path!r}, samples={self.samples}, fields={list(self.fields)})"


def open(path, settings=None):
    """The dataset flattened at path (DATASET.ddx), read from its origin files: an
    OriginDataset, with get_batch, row_sizes, batch_bytes and reader() as a store's Dataset."""
    return OriginDataset(path, settings)


class EmbeddedDataset(Dataset):
    """A dataset of an embedded Store: also reads collectively (every rank at once)."""

    def __init__(self, store, name):
        super().__init__(name, store.samples(name), store.fields(name), lambda: store.reader(name))
        self._store = store

    def get_batch_collective(self, field, ids, out=None):
        """Collective over the Store's ranks: each rank passes its own ids (possibly none) and
        gets its rows, exchanged all-to-all in bounded rounds."""
        return self._store.get_batch_collective(self.name, self._reader(), field, ids, out=out)


class Store:
    """The embedded store of an MPI job (DDStore style): every rank holds a shard of each
    loaded dataset. Construction, load() and close() are collective.

    comm: an mpi4py communicator (default MPI.COMM_WORLD) or a Fortran handle (int).
    max_round_bytes, direct_on_node, allow_stale, mem_limit (bytes of shards per rank; 0: 80%
    of the node's available memory, or the free space of /dev/shm if less, shared by its ranks),
    transport ("mpi" or "fabric") and settings (a dict, as for Client: fabric.provider,
    read_timeout...): as StoreOptions in ddstage/store.hpp. transport="fabric" makes no MPI
    window (shards are plain memory registered with libfabric), so it runs where MPI reaches
    other nodes over TCP only, under mpi4py's default MPI_THREAD_MULTIPLE; "mpi" there needs
    OMPI_MCA_osc=pt2pt and a lower thread level (pt2pt refuses MPI_THREAD_MULTIPLE).
    Close it before MPI is finalized: `with ddstage.Store(comm) as store:`, close(), or at
    interpreter exit, which closes every open Store before mpi4py finalizes MPI."""

    def __init__(self, comm=None, **options):
        if not HAVE_MPI:
            raise UsageError("this ddstage was built without MPI: no embedded Store")
        if comm is None:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        handle = comm if isinstance(comm, int) else comm.py2f()
        if "settings" in options:
            options["settings"] = _setting_texts(options["settings"])
        self._store = _ddstage.Store(handle, **options)
        _close_at_exit(self)

    rank = property(lambda self: self._store.rank)
    size = property(lambda self: self._store.size)
    thread_level = property(lambda self: self._store.thread_level)
    closed = property(lambda self: self._store.closed)

    def load(self, index, name=None, verify=False):
        """Collective: every rank loads its shard of the index DATASET.ddx; returns the name."""
        return self._store.load(os.fspath(index), name or "", verify)

    def dataset(self, name):
        """A loaded dataset; its readers read other ranks' rows with MPI one-sided gets."""
        return EmbeddedDataset(self._store, name)

    def close(self):
        """Collective: frees every dataset's window; readers refuse to read afterwards."""
        self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# serial -> Store, for closing what is still open at exit in reverse creation order (the same
# order on every rank, as closing is collective).
_open_stores = weakref.WeakValueDictionary()
_serials = itertools.count()
_exit_hook = []


def _close_at_exit(store):
    # Registered when the first Store exists, so after mpi4py's own hook: atexit runs it first,
    # before mpi4py finalizes MPI.
    if not _exit_hook:
        _exit_hook.append(atexit.register(_close_open_stores))
    _open_stores[next(_serials)] = store


def _close_open_stores():
    for serial in sorted(_open_stores.keys(), reverse=True):
        store = _open_stores.get(serial)
        if store is not None and not store.closed:
            store.close()
