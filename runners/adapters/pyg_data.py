"""Canonical Graph -> the torch_geometric.data.Data that the PyG adapter trains on.

The graph reaches NeighborLoader as a transposed SparseTensor (`adj_t`) built on the
memory-mapped CSC arrays: the CSR over destinations of adj_t IS the CSC on disk, so nothing
is converted or copied, and ranks on one machine share one copy. Features and labels share
memory with the dataset's read-only memory maps too.
"""

from __future__ import annotations

from torch_geometric.data import Data

from runners.adapters import shared_tensor


def to_pyg_data(graph) -> Data:
    """`Data(x, y, adj_t, num_nodes)`; adj_t's row r lists the SOURCES of the edges into r.

    Splits are not attributes: PyG copies every graph-level attribute into each mini-batch,
    and with loader workers each batch would ship them through shared memory again.
    """
    from torch_sparse import SparseTensor

    n = int(graph.num_nodes)
    adj_t = SparseTensor(rowptr=shared_tensor(graph.indptr), col=shared_tensor(graph.indices),
                         sparse_sizes=(n, n), is_sorted=True, trust_data=True)
    return Data(x=shared_tensor(graph.features), y=shared_tensor(graph.labels), adj_t=adj_t, num_nodes=n)
