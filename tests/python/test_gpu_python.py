"""get_batch(out=device array) from Python: out= in device memory through
__cuda_array_interface__, read by libcore's device path.

Without a GPU (here, and in CI) the interface is still checked, before any device call: a
malformed one gets the UsageErrors numpy's out= gets, and a well-formed one a ddstage.Error
saying why there is no GPU. With one (tests/gpu/run-on-device.sh), device reads over shared
memory and libfabric are byte-identical to host reads: into torch CUDA tensors where torch has
CUDA, else into memory from the CUDA runtime itself (ctypes), as Debian's torch has none."""
import ctypes
import glob

import numpy as np
import pytest

import ddstage
from conftest import GRAPHS, ROWS, random_ids, served_over

NOT_DEVICE = r"out is device memory \(__cuda_array_interface__\), but (no GPU: |.* is not device memory)"


class FakeDeviceArray:
    """An object that says it is device memory: a host buffer's pointer behind an interface
    that a test may edit. No runtime takes that pointer for device memory."""

    def __init__(self, dims, dtype="<f4", **edits):
        self.host = np.full(int(np.prod(dims)) * np.dtype(dtype).itemsize, 7, np.uint8)
        self.__cuda_array_interface__ = {"shape": tuple(dims), "typestr": np.dtype(dtype).str, "strides": None,
                                         "data": (self.host.ctypes.data, False), "version": 3, "stream": None}
        self.__cuda_array_interface__.update(edits)


class FailingInterface:
    """An interface that raises, as torch's does for a bool tensor (KeyError) or one that
    requires grad (RuntimeError)."""

    def __init__(self, error):
        self.error = error

    @property
    def __cuda_array_interface__(self):
        raise self.error


@pytest.fixture(scope="module")
def rows(store):
    return ddstage.Client(store.dir).open("rows")


def test_device_out_without_a_gpu_is_refused_naming_why(rows):
    """A well-formed interface passes every check and reaches the device lookup, which fails
    clearly: no runtime or no device here, or (on a GPU node) a pointer that is not device
    memory. Nothing is written to the pointer. The flat uint8 form is accepted as numpy's is."""
    ids = random_ids(ROWS, 1, count=8)
    for out in (FakeDeviceArray((len(ids), 768)), FakeDeviceArray((len(ids) * 3072,), "|u1")):
        with pytest.raises(ddstage.Error, match=NOT_DEVICE):
            rows.get_batch("x", ids, out=out)
        assert (out.host == 7).all()


def test_variable_rows_into_device_memory_reach_the_device_lookup(store):
    """Variable rows: data into the device array, sized by batch_bytes; offsets stay on the host."""
    graphs = ddstage.Client(store.dir).open("graphs")
    ids = [3, 0, 7]
    info = graphs.fields["x"]
    elements = graphs.batch_bytes("x", ids) // info.dtype.itemsize
    with pytest.raises(ddstage.Error, match=NOT_DEVICE):
        graphs.get_batch("x", ids, out=FakeDeviceArray((elements,), info.dtype.str))


def test_empty_batch_into_device_memory_copies_nothing(rows):
    """torch gives a pointer of 0 for an empty tensor: there is nothing to copy, and no device
    is asked."""
    out = FakeDeviceArray((0, 768), data=(0, False))
    assert rows.get_batch("x", [], out=out) is out


@pytest.mark.parametrize("edits,words", [
    ({"shape": (9, 768)}, "out holds 27648 bytes; this batch of field 'x' is 24576 bytes"),
    ({"typestr": "<f8"}, "out holds 49152 bytes"),
    ({"typestr": "not a dtype"}, "no valid 'typestr'"),
    ({"strides": (8 * 768, 8)}, "out must be C-contiguous"),
    ({"strides": (4, 8 * 4)}, "out must be C-contiguous"),
    ({"data": (0, True)}, "out must be writable"),
    ({"data": None}, "no valid 'data'"),
    ({"mask": object()}, "out must not be masked"),
    ({"shape": (8, -768)}, "no valid 'shape'"),
    ({"version": 4}, "version 4; ddstage reads versions 0 to 3"),
    ({"stream": 0}, "no valid 'stream'"),
], ids=["rows", "dtype", "typestr", "strides", "fortran", "readonly", "data", "mask", "negative", "version",
        "stream0"])
def test_malformed_interface_gets_numpy_out_errors(rows, edits, words):
    """The same one-line UsageErrors as numpy's out=, before any device call (so here, without
    a GPU), and not a byte written."""
    out = FakeDeviceArray((8, 768), **edits)
    with pytest.raises(ddstage.UsageError, match=words):
        rows.get_batch("x", random_ids(ROWS, 2, count=8)[:8], out=out)
    assert (out.host == 7).all()


def test_contiguous_strides_and_failing_interfaces(rows):
    """C-order strides spelled out are contiguous (axes of length 1 may have any stride); an
    interface property that raises is a UsageError quoting it; a CPU torch tensor (no interface)
    is neither numpy nor device memory."""
    with pytest.raises(ddstage.Error, match=NOT_DEVICE):
        rows.get_batch("x", [1], out=FakeDeviceArray((1, 768), strides=(12345, 4)))
    with pytest.raises(ddstage.UsageError, match=r"__cuda_array_interface__ failed: KeyError: 'torch.bool' "
                                                 r"\(torch has none for bool .* out.view\(torch.uint8\)\)$"):
        rows.get_batch("x", [1], out=FailingInterface(KeyError("torch.bool")))
    with pytest.raises(ddstage.UsageError, match=r"__cuda_array_interface__ failed: RuntimeError: requires grad$"):
        rows.get_batch("x", [1], out=FailingInterface(RuntimeError("requires grad")))
    torch = pytest.importorskip("torch")
    with pytest.raises(ddstage.UsageError, match="out must be a numpy array or device memory, not Tensor"):
        rows.get_batch("x", [1], out=torch.empty(1, 768))


# ---- on a GPU node -------------------------------------------------------------------------

class CudaMemory:
    """Device memory from the CUDA runtime (ctypes), exposing __cuda_array_interface__ v3."""

    def __init__(self, cudart, shape, dtype):
        self.cudart, self.shape, self.dtype = cudart, tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        ptr = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(max(self.nbytes, 1))) == 0
        self.ptr = ptr.value
        # A row that get_batch never wrote shows as 0xAB bytes.
        assert cudart.cudaMemset(ctypes.c_void_p(self.ptr), 0xAB, ctypes.c_size_t(self.nbytes)) == 0
        assert cudart.cudaDeviceSynchronize() == 0
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": self.dtype.str, "strides": None,
                                         "data": (self.ptr, False), "version": 3, "stream": 1}

    def numpy(self):
        host = np.empty(self.shape, self.dtype)
        device_to_host = 2
        assert self.cudart.cudaMemcpy(ctypes.c_void_p(host.ctypes.data), ctypes.c_void_p(self.ptr),
                                      ctypes.c_size_t(self.nbytes), device_to_host) == 0
        return host

    def __del__(self):
        self.cudart.cudaFree(ctypes.c_void_p(self.ptr))


def device_memory():
    """(empty(shape, numpy dtype) -> device array, to_numpy(array)), or the reason there is none."""
    try:
        import torch
        if torch.cuda.is_available():
            # The Loader's form: out=torch.empty(..., device=...).
            return (lambda shape, dtype: torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype,
                                                     device="cuda"),
                    lambda t: t.cpu().numpy()), None
    except ImportError:
        pass
    for name in ["libcudart.so", *sorted(glob.glob("/usr/local/cuda*/lib*/libcudart.so*"))]:
        try:
            cudart = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return None, "no GPU: torch has no CUDA and no libcudart.so loads"
    count = ctypes.c_int(0)
    if cudart.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "no GPU: torch has no CUDA and the CUDA runtime finds no device"
    return (lambda shape, dtype: CudaMemory(cudart, shape, dtype), CudaMemory.numpy), None


@pytest.fixture(scope="module")
def device():
    memory, why_not = device_memory()
    if memory is None:
        pytest.skip(why_not)
    return memory


@pytest.fixture(scope="module", params=[("shm", "staged"), ("shm", "direct"), ("fabric", "auto")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def served(request, device, data, tmp_path_factory):
    """A store per transport, read with that gpu.path (direct is shared memory only)."""
    transport, path = request.param
    with pytest.MonkeyPatch.context() as mp:
        s, settings = served_over(transport, data, tmp_path_factory.mktemp(transport) / "store", mp)
        try:
            yield ddstage.Client(s.dir, settings={**settings, "gpu.path": path})
        finally:
            s.close()


def test_device_reads_equal_host_reads(served, device):
    """Fixed fields at several batch sizes (unsorted, repeats, every sample), each byte in device
    memory equal to the host read; get_batch returns the array it was given."""
    empty, to_numpy = device
    rows = served.open("rows")
    for field, dtype, shape in (("x", np.float32, (768,)), ("y", rows.fields["y"].dtype, ())):
        for ids in (np.array([7]), random_ids(ROWS, 3, count=64), np.arange(ROWS)[::-1]):
            out = empty((len(ids), *shape), dtype)
            assert rows.get_batch(field, ids, out=out) is out
            assert to_numpy(out).tobytes() == rows.get_batch(field, ids).tobytes()


def test_variable_rows_into_device_memory(served, device):
    """Variable rows: the data in device memory equal to the host read, offsets on the host."""
    empty, to_numpy = device
    graphs = served.open("graphs")
    ids = random_ids(GRAPHS, 4, count=16)
    data, offsets = graphs.get_batch("x", ids)
    out = empty(data.shape, data.dtype)
    got, got_offsets = graphs.get_batch("x", ids, out=out)
    assert got is out and to_numpy(out).tobytes() == data.tobytes()
    np.testing.assert_array_equal(got_offsets, offsets)
