"""Canonical Graph -> torch_geometric.data.Data.

Features, labels and splits share memory with the dataset's read-only memory maps (no
copy); only `edge_index` is new memory, since PyG wants the COO pairs as one [2, E] tensor.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch_geometric.data import Data


def shared_tensor(arr: np.ndarray) -> torch.Tensor:
    """torch.from_numpy on a (possibly read-only memory-mapped) array, without a copy.

    torch warns about non-writable arrays because it has no read-only tensors; these tensors
    are inputs that nothing writes to. Writing to one would fault, not corrupt the dataset.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr)


def csc_to_edge_index(indptr: np.ndarray, indices: np.ndarray) -> torch.Tensor:
    """[2, E]: row 0 = source (the CSC indices), row 1 = destination (the CSC column).

    The result is sorted by destination, then source, i.e. in CSC order, so PyG's
    NeighborLoader can be given `is_sorted=True` and skip its own sort.
    """
    num_nodes = len(indptr) - 1
    edge_index = torch.empty((2, len(indices)), dtype=torch.long)
    edge_index[0] = shared_tensor(indices)
    deg = shared_tensor(np.diff(indptr))
    edge_index[1] = torch.repeat_interleave(torch.arange(num_nodes, dtype=torch.long), deg)
    return edge_index


def split_tensors(graph) -> dict:
    """{'train_idx', 'val_idx', 'test_idx'}: int64 sorted node ids, sharing memory."""
    return {k: shared_tensor(getattr(graph, k)) for k in ("train_idx", "val_idx", "test_idx")}


def to_pyg_data(graph, with_splits: bool = True) -> Data:
    """A `Data` with x, y, edge_index (row = source, col = destination), num_nodes and, with
    `with_splits`, the split index tensors `train_idx`, `val_idx`, `test_idx`.

    Give a NeighborLoader the Data WITHOUT splits (with_splits=False, seeds from
    `split_tensors`): PyG copies every graph-level attribute into each mini-batch, and with
    loader workers each batch would ship the split tensors through shared memory again.
    """
    data = Data(
        x=shared_tensor(graph.features),
        y=shared_tensor(graph.labels),
        edge_index=csc_to_edge_index(graph.indptr, graph.indices),
        num_nodes=int(graph.num_nodes),
    )
    if with_splits:
        for key, value in split_tensors(graph).items():
            data[key] = value
    return data
