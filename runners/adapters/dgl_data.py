"""Canonical Graph -> the dgl.DGLGraph that the DGL adapter trains on, built from the CSC.

The graph is created in CSC format only, the one DGL's neighbour sampler uses for in-edges,
so no COO/CSR conversion happens unless something asks for it. Features and labels share
memory with the dataset's read-only memory maps (no copy). Splits are not attached: the
harness hands every loader its seeds.
"""

from __future__ import annotations

import dgl
import torch

from runners.adapters import shared_tensor

def to_dgl_graph(graph) -> dgl.DGLGraph:
    """DGLGraph with ndata 'feat' (float32) and 'label' (int64).

    Edge ids are the positions in the CSC `indices` array, so edge e of DGL is the same
    edge as entry e of the CSC `indices` that PyG's adj_t (pyg_data.to_pyg_data) holds.
    """
    n = int(graph.num_nodes)
    indptr = shared_tensor(graph.indptr)
    indices = shared_tensor(graph.indices)
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.long))), num_nodes=n)
    g.ndata["feat"] = shared_tensor(graph.features)
    g.ndata["label"] = shared_tensor(graph.labels)
    return g
