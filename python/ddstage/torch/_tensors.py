"""Rows of a ddstage batch as torch tensors: what the map-style Dataset and the Loader share."""
import numpy as np
import torch

from .. import UsageError

_WIDER = {np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64, np.dtype(np.uint64): np.int64}


def _tensor(array):
    wider = _WIDER.get(array.dtype)
    return torch.from_numpy(array if wider is None else array.astype(wider))


def _checked_fields(dataset, fields):
    fields = list(dataset.fields) if fields is None else list(fields)
    if not fields:
        raise UsageError("fields is empty: name at least one field")
    return {name: dataset.field(name) for name in fields}


def _rows_to_tensors(result, field):
    if field.variable:
        data, offsets = result
        return _tensor(data), torch.from_numpy(offsets)
    return _tensor(result)


def _batch_tensors(get_batch, fields, ids, verify):
    """{field: its rows for ids as tensors}, one get_batch (a reader's or a Dataset's) per field."""
    return {name: _rows_to_tensors(get_batch(name, ids, verify=verify), field)
            for name, field in fields.items()}
