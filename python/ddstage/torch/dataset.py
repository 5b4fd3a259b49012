"""Map-style torch Datasets over a ddstage dataset."""
import torch.utils.data

from ._tensors import _checked_fields, _tensor

class Dataset(torch.utils.data.Dataset):
    """Map-style: dataset[i] is one sample, {field: tensor of the field's row shape} (a
    variable-length field: its row, the length of the first axis varying). For whole batches
    read Loader: one get_batch per field and batch instead of one per sample."""

    def __init__(self, dataset, fields=None, verify=False):
        self.dataset = dataset
        self.fields = _checked_fields(dataset, fields)
        self.verify = verify

    def __len__(self):
        return self.dataset.samples

    def __getitem__(self, i):
        i = int(i)
        if i < 0:
            i += len(self)
        sample = {}
        for name, field in self.fields.items():
            rows = self.dataset.get_batch(name, [i], verify=self.verify)
            # A batch of one: all the values of a variable one; the one row of a fixed one, as
            # an array even for scalars (torch.from_numpy takes no numpy scalar).
            sample[name] = _tensor(rows[0] if field.variable else rows.reshape(rows.shape[1:]))
        return sample
