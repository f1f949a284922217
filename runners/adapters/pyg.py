"""PyTorch Geometric adapter: NeighborLoader over a zero-copy CSC graph, SAGEConv/GATConv/GCNConv models.

Measurement choices (recorded in every result):
- The graph reaches NeighborLoader as a transposed `SparseTensor` (`adj_t`) built directly
  on the memory-mapped CSC arrays, so ranks on one machine share one copy of the graph
  instead of each converting an edge list; sampling is the same `neighbor_sample` call.
  With loader workers, PyG's sampler calls `share_memory_()` on the adjacency, which copies
  it into /dev/shm once per rank: that is PyG's behaviour and is measured as such.
- Every layer runs on all sampled nodes and the seed rows are sliced at the end, as in
  PyG's own DDP example (`--pyg-trim` switches to trimming layer by layer).
- GCN: GCNConv(normalize=False, aggr='mean') over the subgraph with self-loops, i.e. the
  mean over each node and its sampled in-neighbours, times one weight matrix (the same
  function as DGL's GraphConv(norm='right') on blocks with self-loops; see MeanGCNConv).
- Seeds are split across ranks by the harness (a fresh padded share per rank every epoch,
  the same shares the DGL adapter trains), as PyG's examples split them by hand;
  NeighborLoader iterates the share in the harness's order.
- Seed-study harness (`--harness study`): the NeighborLoader over the whole training split
  is built inside a LightningDataModule's train_dataloader hook, as the seed study built it,
  so Lightning rebuilds it with a DistributedSampler (each rank trains 1/N of the seeds).
"""

from __future__ import annotations

import torch

from runners.adapters import (Adapter, Batch, LayerWork, ModelBuilder, between_layers, layer_choice,
                              layer_shapes, model_builder)
from runners.adapters.pyg_data import to_pyg_data


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
        "pyg-lib from PyG's wheel index (see docs/setup.md, 'GPU machines')."
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


def _sage(d_in, d_out, heads, dropout, self_loops):
    from torch_geometric.nn import SAGEConv

    return SAGEConv(d_in, d_out, aggr="mean")


def _gat(d_in, d_out, heads, dropout, self_loops):
    from torch_geometric.nn import GATConv

    return GATConv(d_in, d_out, heads=heads, concat=True, dropout=dropout, add_self_loops=self_loops)


class MeanGCNConv(torch.nn.Module):
    """GCNConv averaging over the node itself and its in-neighbours in the sampled subgraph.

    GCNConv's own symmetric normalisation divides by sqrt(deg(i) deg(j)) with both degrees
    counted as IN-degrees of the sampled subgraph, while DGL's GraphConv(norm='both') counts
    the source's OUT-degree in the block: on a sampled (directed) subgraph they are different
    functions, and a block does not even know a source node's in-degree. The mean depends only
    on the destination's in-degree, which both frameworks' subgraphs share.
    """

    def __init__(self, d_in: int, d_out: int, self_loops: bool):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(d_in, d_out, normalize=False, aggr="mean")
        self.self_loops = self_loops

    def forward(self, x, edge_index):
        if self.self_loops:
            from torch_geometric.utils import add_self_loops

            edge_index, _ = add_self_loops(edge_index, num_nodes=x.size(0))
        return self.conv(x, edge_index)


# model name -> how to build one layer (adapters.ModelBuilder)
MODEL_BUILDERS = {
    "sage": ModelBuilder(_sage, lambda c: [("weight", c.lin_l.weight), ("weight", c.lin_r.weight),
                                           ("bias", c.lin_l.bias)],
                         "SAGEConv(aggr='mean')"),
    "gat": ModelBuilder(_gat, lambda c: [("weight", c.lin.weight), ("att", c.att_src), ("att", c.att_dst),
                                         ("bias", c.bias)],
                        "GATConv(concat=True), attention dropout = dropout", "GATConv(add_self_loops=True)"),
    "gcn": ModelBuilder(lambda d_in, d_out, h, dropout, loops: MeanGCNConv(d_in, d_out, loops),
                        lambda c: [("weight", c.conv.lin.weight), ("bias", c.conv.bias)],
                        "GCNConv(normalize=False, aggr='mean'): mean over the node and its sampled in-neighbours",
                        "add_self_loops on the sampled subgraph before every GCNConv"),
}


def hop_counts(edge_index, batch_size: int, num_nodes: int, hops: int) -> tuple:
    """(nodes per hop, edges per hop) of a sampled subgraph, as pyg-lib's sampler reports them
    (`num_sampled_nodes`, `num_sampled_edges`: what trim_to_layer reads); the torch-sparse
    sampler reports neither. Derived from the subgraph's own order: the seeds come first and each
    hop appends the nodes it found, and hop k's edges end at the nodes new at hop k-1 (the
    sampler grows the frontier from those only), so with the edges sorted by destination (adj_t's
    order) hop k's edges are those whose destination is in hop k-1's range of nodes. Raises when
    the subgraph is not in that order, rather than trim the wrong rows."""
    src, dst = edge_index
    nodes, edges = [int(batch_size)], []
    begin, end, at = 0, int(batch_size), 0
    for _ in range(hops):
        until = at + int(torch.searchsorted(dst[at:], torch.tensor(end, dtype=dst.dtype)))
        if bool((dst[at:until] < begin).any()):
            raise ValueError("the sampled edges are not sorted by destination hop by hop")
        found = int(src[at:until].max()) + 1 if until > at else end
        edges.append(until - at)
        nodes.append(max(found, end) - end)
        begin, end, at = end, max(found, end), until
    if end != num_nodes or at != dst.numel():
        raise ValueError(f"the sampled subgraph's {num_nodes} nodes and {dst.numel()} edges are not the "
                         f"{end} nodes and {at} edges of {hops} hops from its {batch_size} seeds")
    return nodes, edges


def trimmed_layer_work(nodes_per_hop, edges_per_hop) -> tuple:
    """LayerWork of every layer under trim_to_layer: layer i (of L, counted from the input)
    drops the outermost i hops, so it computes on the nodes of hops 0..L-i and the edges of
    hops 1..L-i (untrimmed, every layer computes on the whole sampled subgraph)."""
    nodes, edges = [int(n) for n in nodes_per_hop], [int(e) for e in edges_per_hop]
    hops = len(edges)
    return tuple(LayerWork(sum(nodes[:hops + 1 - i]), sum(nodes[:hops + 1 - i]), sum(edges[:hops - i]))
                 for i in range(hops))


class PygModel(torch.nn.Module):
    """A stack of PyG convolutions, built by MODEL_BUILDERS[model] from layer_shapes()."""

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 heads: int, dropout: float, self_loops: bool, trim: bool = False):
        super().__init__()
        spec = model_builder(MODEL_BUILDERS, "pyg", model)
        self._params = spec.parameters
        self.kind, self.dropout, self.trim = model, dropout, trim
        self.convs = torch.nn.ModuleList(
            spec.build(d_in, d_out, h, dropout, self_loops)
            for d_in, d_out, h in layer_shapes(model, in_dim, hidden, out_dim, layers, heads))

    def canonical_parameters(self) -> list:
        """(role, tensor) in the framework-independent order of adapters.init_canonical."""
        return [p for conv in self.convs for p in self._params(conv)]

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
        self.backend = sampler_backend()
        self.data = to_pyg_data(graph)
        hops_from = ("from the sampler" if self.backend == "pyg-lib"
                     else "derived from the sampled subgraph: runners.adapters.pyg.hop_counts")
        self.choices = {
            "graph_input": "adj_t SparseTensor on the memory-mapped CSC (zero-copy"
                           + ("; PyG copies it to shared memory for its workers)" if cfg.workers else ")"),
            "sampler": f"torch_geometric.loader.NeighborLoader ({self.backend}"
                       + ("" if self.backend == "pyg-lib" else "; pyg-lib, PyG's own faster sampler, is not installed")
                       + ")",
            "layer_compute": f"trim_to_layer (per-hop counts {hops_from})" if cfg.pyg_trim
                             else "all sampled nodes every layer",
            "seed_split": ("Lightning's DistributedSampler (loader built in a LightningDataModule hook, "
                           "as the seed study did)" if cfg.harness == "study"
                           else "harness: fresh equal padded share per rank every epoch (same as DGL)"),
            "neighbourhoods": "sampled once per node (hop k samples only the nodes new at hop k-1)",
            "self_loops": (MODEL_BUILDERS[cfg.model].self_loops if cfg.self_loops else None) or "none",
            "layer": layer_choice(MODEL_BUILDERS, cfg.model),
            "feature_gather": ("in the loader workers, with the sampling" if cfg.workers
                               else "in the training process, with the sampling"),
            "batch_prepare": "adj_t.coo() -> edge_index (timed as the prepare phase)",
            "sampled_edges": "edges of the sampled subgraph, each counted once",
        }

    def build_model(self):
        c = self.cfg
        return PygModel(c.model, self.graph.num_features, c.hidden, self.graph.num_classes,
                        c.layers, c.heads, c.dropout, c.self_loops, trim=c.pyg_trim)

    def _loader(self, seeds, batch_size, shuffle, workers, worker_init_fn=None, persistent=True):
        from torch_geometric.loader import NeighborLoader

        # A long tensor reaches NodeSamplerInput as it is (no copy), so workers read the
        # harness's in-place per-epoch rewrite of the training share.
        return NeighborLoader(
            self.data, num_neighbors=list(self.cfg.fanouts_framework),
            input_nodes=torch.as_tensor(seeds, dtype=torch.long), batch_size=batch_size,
            shuffle=shuffle, replace=self.cfg.replace, num_workers=workers,
            persistent_workers=persistent and workers > 0, worker_init_fn=worker_init_fn,
        )

    def train_loader(self, rank_seeds, worker_init_fn):
        return self._loader(rank_seeds, self.cfg.batch_size, False, self.cfg.workers, worker_init_fn)

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
        nodes, edges = int(raw.num_nodes), int(edge_index.size(1))
        layers = len(self.cfg.fanouts_framework)
        if self.cfg.pyg_trim:
            extra = self._hops(raw, edge_index)
            work = trimmed_layer_work(*extra)
        else:
            extra, work = (None, None), (LayerWork(nodes, nodes, edges),) * layers
        return Batch(inputs=(raw.x, edge_index, raw.batch_size, *extra),
                     labels=raw.y[: raw.batch_size], seed_nodes=int(raw.batch_size),
                     sampled_nodes=nodes, sampled_edges=edges, seed_ids=raw.n_id[: raw.batch_size],
                     layers=work, feature_bytes=raw.x.numel() * raw.x.element_size())

    def _hops(self, raw, edge_index) -> tuple:
        """The per-hop counts trim_to_layer reads: the sampler's own (pyg-lib), else hop_counts."""
        if "num_sampled_nodes" in raw:
            return raw.num_sampled_nodes, raw.num_sampled_edges
        return hop_counts(edge_index, raw.batch_size, raw.num_nodes, len(self.cfg.fanouts_framework))

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
