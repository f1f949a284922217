"""Canonical Graph -> dgl.DGLGraph, built from the CSC arrays directly.

The graph is created in CSC format only, the one DGL's neighbour sampler uses for in-edges,
so no COO/CSR conversion happens unless something asks for it. Features, labels and the
splits share memory with the dataset's read-only memory maps (no copy).

Splits are available two ways:
- `g.ndata['train_mask' | 'val_mask' | 'test_mask']` (bool), which survive DGL operations;
- `g.train_idx`, `g.val_idx`, `g.test_idx` (int64 tensors, sorted), plain Python
  attributes on the returned object (not kept by copies or subgraphs), the seed-node
  tensors DGL's DataLoader takes.
"""

from __future__ import annotations

import warnings

import dgl
import numpy as np
import torch

SPLIT_NAMES = ("train", "val", "test")


def shared_tensor(arr: np.ndarray) -> torch.Tensor:
    """torch.from_numpy without a copy, also for read-only memory maps (torch warns about
    those because it has no read-only tensors; nothing writes to these inputs). Duplicated
    from pyg_data so that DGL processes never import PyG."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr)


def _mask(num_nodes: int, idx: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[idx] = True
    return mask


def to_dgl_graph(graph) -> dgl.DGLGraph:
    """DGLGraph with ndata 'feat' (float32), 'label' (int64) and split masks/attributes.

    Edge ids are the positions in the CSC `indices` array, so edge e of DGL is the same
    edge as column e of PyG's `edge_index` from `to_pyg_data`.
    """
    n = int(graph.num_nodes)
    indptr = shared_tensor(graph.indptr)
    indices = shared_tensor(graph.indices)
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.long))), num_nodes=n)
    g.ndata["feat"] = shared_tensor(graph.features)
    g.ndata["label"] = shared_tensor(graph.labels)
    for split in SPLIT_NAMES:
        idx = shared_tensor(np.asarray(getattr(graph, f"{split}_idx")))
        g.ndata[f"{split}_mask"] = _mask(n, idx)
        setattr(g, f"{split}_idx", idx)
    return g
