"""PyTorch Geometric adapter: NeighborLoader over a zero-copy CSC graph, SAGEConv/GATConv models.

Measurement choices (recorded in every result):
- The graph reaches NeighborLoader as a transposed `SparseTensor` (`adj_t`) built directly
  on the memory-mapped CSC arrays, so ranks on one machine share one copy of the graph
  instead of each converting an edge list; sampling is the same `neighbor_sample` call.
  With loader workers, PyG's sampler calls `share_memory_()` on the adjacency, which copies
  it into /dev/shm once per rank: that is PyG's behaviour and is measured as such.
- Every layer runs on all sampled nodes and the seed rows are sliced at the end, as in
  PyG's own DDP example (`--pyg-trim` switches to trimming layer by layer).
- Seeds are split across ranks by the harness into equal shares (padded), as PyG's
  examples split them by hand; NeighborLoader then shuffles within the share.
- Seed-study harness (`--harness study`): the NeighborLoader over the whole training split
  is built inside a LightningDataModule's train_dataloader hook, as the seed study built it,
  so Lightning rebuilds it with a DistributedSampler (each rank trains 1/N of the seeds).
"""

from __future__ import annotations

import torch

from runners.adapters import Adapter, Batch, between_layers, layer_shapes
from runners.adapters.pyg_data import shared_tensor as as_tensor


def sampler_backend() -> str:
    """The backend NeighborLoader uses here ('pyg-lib' or 'torch-sparse'), or raise."""
    from torch_geometric import typing as pyg_typing

    if getattr(pyg_typing, "WITH_PYG_LIB", False):
        return "pyg-lib"
    if getattr(pyg_typing, "WITH_TORCH_SPARSE", False):
        return "torch-sparse"
    raise RuntimeError(
        "PyG's NeighborLoader needs pyg-lib or torch-sparse and neither imports here. "
        "CPU: `make setup` builds torch-scatter and torch-sparse from source; GPU: install "
        "pyg-lib from PyG's wheel index (see README, 'GPU machines')."
    )


def self_check() -> str:
    """Sample one mini-batch of a 4-node ring and run one conv; returns the sampler backend."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import SAGEConv

    ring = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    data = Data(x=torch.randn(4, 3), edge_index=ring, num_nodes=4)
    batch = next(iter(NeighborLoader(data, num_neighbors=[2], batch_size=2)))
    SAGEConv(3, 2)(batch.x, batch.edge_index)
    return sampler_backend()


class PygModel(torch.nn.Module):
    """GraphSAGE (mean) or GAT as a stack of PyG convolutions."""

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 heads: int, dropout: float, self_loops: bool, trim: bool = False):
        super().__init__()
        from torch_geometric.nn import GATConv, SAGEConv

        self.kind, self.dropout, self.trim = model, dropout, trim
        self.convs = torch.nn.ModuleList()
        for d_in, d_out, h in layer_shapes(model, in_dim, hidden, out_dim, layers, heads):
            if model == "sage":
                self.convs.append(SAGEConv(d_in, d_out, aggr="mean"))
            else:
                self.convs.append(GATConv(d_in, d_out, heads=h, concat=True, dropout=dropout,
                                          add_self_loops=self_loops))

    def canonical_parameters(self) -> list:
        """(role, tensor) in the framework-independent order of adapters.init_canonical."""
        out = []
        for conv in self.convs:
            if self.kind == "sage":
                out += [("weight", conv.lin_l.weight), ("weight", conv.lin_r.weight), ("bias", conv.lin_l.bias)]
            else:
                out += [("weight", conv.lin.weight), ("att", conv.att_src), ("att", conv.att_dst),
                        ("bias", conv.bias)]
        return out

    def forward(self, x, edge_index, num_sampled_nodes=None, num_sampled_edges=None):
        for i, conv in enumerate(self.convs):
            if self.trim and num_sampled_nodes is not None:
                from torch_geometric.utils import trim_to_layer

                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes, num_sampled_edges, x, edge_index)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = between_layers(x, self.kind, self.dropout, self.training)
        return x


class PygAdapter(Adapter):
    name = "pyg"

    def __init__(self, cfg, graph, rank, world_size, device):
        super().__init__(cfg, graph, rank, world_size, device)
        from torch_geometric.data import Data
        from torch_sparse import SparseTensor

        self.backend = sampler_backend()
        n = graph.num_nodes
        # adj_t is the transposed adjacency: its CSR over destinations IS the CSC on disk.
        adj_t = SparseTensor(rowptr=as_tensor(graph.indptr), col=as_tensor(graph.indices),
                             sparse_sizes=(n, n), is_sorted=True, trust_data=True)
        self.data = Data(x=as_tensor(graph.features), y=as_tensor(graph.labels), adj_t=adj_t,
                         num_nodes=n)
        self.choices = {
            "graph_input": "adj_t SparseTensor on the memory-mapped CSC (zero-copy"
                           + ("; PyG copies it to shared memory for its workers)" if cfg.workers else ")"),
            "sampler": f"torch_geometric.loader.NeighborLoader ({self.backend})",
            "layer_compute": "trim_to_layer" if cfg.pyg_trim else "all sampled nodes every layer",
            "seed_split": ("Lightning's DistributedSampler (loader built in a LightningDataModule hook, "
                           "as the seed study did)" if cfg.harness == "study"
                           else "harness: equal padded share per rank"),
            "neighbourhoods": "sampled once per node (hop k samples only the nodes new at hop k-1)",
            "self_loops": "GATConv(add_self_loops=True)" if cfg.self_loops else "none",
        }

    def build_model(self):
        c = self.cfg
        return PygModel(c.model, self.graph.num_features, c.hidden, self.graph.num_classes,
                        c.layers, c.heads, c.dropout, c.self_loops, trim=c.pyg_trim)

    def _loader(self, seeds, batch_size, shuffle, workers, worker_init_fn=None, persistent=True):
        from torch_geometric.loader import NeighborLoader

        return NeighborLoader(
            self.data, num_neighbors=list(self.cfg.fanouts_framework),
            input_nodes=torch.as_tensor(seeds, dtype=torch.long), batch_size=batch_size,
            shuffle=shuffle, replace=self.cfg.replace, num_workers=workers,
            persistent_workers=persistent and workers > 0, worker_init_fn=worker_init_fn,
        )

    def train_loader(self, rank_seeds, worker_init_fn):
        return self._loader(rank_seeds, self.cfg.batch_size, True, self.cfg.workers, worker_init_fn)

    def eval_loader(self, seeds):
        return self._loader(seeds, self.cfg.eval_batch_size, False, 0)

    study_loader_in_hook = True  # the seed study built its NeighborLoader in a DataModule hook

    def study_train_loader(self, worker_init_fn):
        # PyTorch's default non-persistent workers, as the study left them: forked afresh every epoch.
        return self._loader(self.graph.train_idx, self.cfg.batch_size, True, self.cfg.workers, worker_init_fn,
                            persistent=False)

    def study_eval_loader(self):
        return self.eval_loader(self.graph.val_idx)

    def unpack(self, raw) -> Batch:
        row, col, _ = raw.adj_t.coo()  # adj_t rows are destinations
        edge_index = torch.stack([col, row], dim=0)
        extra = (raw.num_sampled_nodes, raw.num_sampled_edges) if self.cfg.pyg_trim else (None, None)
        return Batch(inputs=(raw.x, edge_index, raw.batch_size, *extra),
                     labels=raw.y[: raw.batch_size], seed_nodes=int(raw.batch_size),
                     sampled_nodes=int(raw.num_nodes), sampled_edges=int(edge_index.size(1)))

    def to_device(self, batch: Batch) -> Batch:
        if self.device.type == "cpu":
            return batch
        x, edge_index, bs, nsn, nse = batch.inputs
        batch.inputs = (x.to(self.device, non_blocking=True),
                        edge_index.to(self.device, non_blocking=True), bs, nsn, nse)
        batch.labels = batch.labels.to(self.device, non_blocking=True)
        return batch

    def forward(self, model, inputs):
        x, edge_index, batch_size, nsn, nse = inputs
        return model(x, edge_index, nsn, nse)[:batch_size]


ADAPTER = PygAdapter
