"""DGL adapter: dgl.dataloading.DataLoader with NeighborSampler over blocks, SAGEConv/GATConv.

Measurement choices (recorded in every result):
- The graph is built from the memory-mapped CSC with only the CSC format materialised
  (neighbour sampling reads in-edges).
- Seeds are split across ranks by DGL itself (`use_ddp=True`, which pads every rank to the
  same number of batches), as in DGL's multi-GPU example; `--uneven-batches` instead hands
  DGL the harness's naive split.
- Blocks shrink layer by layer (DGL's message-flow graphs).
- GAT self-attention: DGL's GATConv has no self-loop option, so each sampled block gets one
  self-loop edge per destination node, which is what PyG's GATConv(add_self_loops=True)
  does on its subgraph.
- Seed-study harness (`--harness study`): the graph gets one self-loop edge per node, as the
  study loaded Reddit (`RedditDataset(self_loop=True)`), so the sampler may draw a node as its
  own neighbour and blocks get no extra self-loops; the DataLoader over the whole training
  split is built without use_ddp and handed to trainer.fit, as the study did. Its dataset is
  iterable, so Lightning leaves it unsharded and every rank trains the whole split.
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import torch  # noqa: E402
from dgl.nn.pytorch import GATConv, SAGEConv  # noqa: E402

from runners.adapters import Adapter, Batch, between_layers, layer_shapes  # noqa: E402
from runners.adapters.dgl_data import shared_tensor as as_tensor  # noqa: E402
from runners.adapters.dgl_data import to_dgl_graph  # noqa: E402


def require_cuda_build() -> None:
    """Refuse a GPU benchmark with DGL's CPU-only build (its wheels carry no +cuXXX tag)."""
    from runners.envinfo import dgl_has_cuda

    if not dgl_has_cuda():
        raise RuntimeError(
            f"DGL {dgl.__version__} is a CPU-only build; a GPU run needs DGL's CUDA build from "
            "DGL's own wheel index (see README, 'GPU machines')"
        )


def add_self_loops(block):
    """The same block plus one edge from each destination node to itself."""
    src, dst = block.edges()
    loop = torch.arange(block.num_dst_nodes(), dtype=src.dtype, device=src.device)
    return dgl.create_block((torch.cat([src, loop]), torch.cat([dst, loop])),
                            num_src_nodes=block.num_src_nodes(), num_dst_nodes=block.num_dst_nodes())


def self_check() -> str:
    """Sample one block of a 4-node ring and run one conv; returns DGL's version."""
    g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])))
    g.ndata["feat"] = torch.randn(4, 3)
    loader = dgl.dataloading.DataLoader(g, torch.tensor([0, 1]), dgl.dataloading.NeighborSampler([2]),
                                        batch_size=2)
    _, _, blocks = next(iter(loader))
    SAGEConv(3, 2, "mean")(blocks[0], blocks[0].srcdata["feat"])
    return f"dgl {dgl.__version__}"


class DglModel(torch.nn.Module):
    """GraphSAGE (mean) or GAT as a stack of DGL convolutions over blocks."""

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 heads: int, dropout: float):
        super().__init__()
        self.kind, self.dropout = model, dropout
        self.convs = torch.nn.ModuleList()
        for d_in, d_out, h in layer_shapes(model, in_dim, hidden, out_dim, layers, heads):
            if model == "sage":
                self.convs.append(SAGEConv(d_in, d_out, "mean"))
            else:
                self.convs.append(GATConv(d_in, d_out, num_heads=h, attn_drop=dropout, allow_zero_in_degree=True))

    def canonical_parameters(self) -> list:
        """(role, tensor) in the framework-independent order of adapters.init_canonical."""
        out = []
        for conv in self.convs:
            if self.kind == "sage":
                out += [("weight", conv.fc_neigh.weight), ("weight", conv.fc_self.weight),
                        ("bias", conv.fc_self.bias)]
            else:
                out += [("weight", conv.fc.weight), ("att", conv.attn_l), ("att", conv.attn_r),
                        ("bias", conv.bias)]
        return out

    def forward(self, blocks, x):
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = conv(block, x)
            if self.kind == "gat":
                x = x.flatten(1)
            if i < len(self.convs) - 1:
                x = between_layers(x, self.kind, self.dropout, self.training)
        return x


class DglAdapter(Adapter):
    name = "dgl"
    splits_seeds_itself = True

    def __init__(self, cfg, graph, rank, world_size, device):
        super().__init__(cfg, graph, rank, world_size, device)
        if device.type == "cuda":
            require_cuda_build()
        self.study = cfg.harness == "study"
        g = to_dgl_graph(graph)
        if self.study:
            g = dgl.add_self_loop(g)  # RedditDataset(self_loop=True), as the seed study loaded it
        self.g = g.formats(["csc"])
        self.gat_loops = cfg.model == "gat" and cfg.self_loops and not self.study
        self.choices = {
            "graph_input": "dgl.graph(('csc', ...)) on the memory-mapped CSC, csc format only",
            "sampler": "dgl.dataloading.NeighborSampler + DataLoader",
            "layer_compute": "blocks shrink layer by layer",
            "neighbourhoods": "sampled afresh for every destination node of every layer",
            "seed_split": ("none: every rank iterates the whole split (loader without use_ddp passed to "
                           "trainer.fit, as the seed study did)" if self.study
                           else "harness naive split" if cfg.uneven_batches else "DGL use_ddp=True (padded)"),
            "self_loops": ("graph-level self-loop on every node (dgl.add_self_loop, as RedditDataset("
                           "self_loop=True)); sampled like any edge" if self.study
                           else "one self-loop per destination added to each block" if self.gat_loops else "none"),
        }

    def seed(self, seed: int) -> None:
        dgl.seed(seed)

    def build_model(self):
        c = self.cfg
        return DglModel(c.model, self.graph.num_features, c.hidden, self.graph.num_classes,
                        c.layers, c.heads, c.dropout)

    def _sampler(self):
        return dgl.dataloading.NeighborSampler(list(self.cfg.fanouts_framework), replace=self.cfg.replace,
                                               prefetch_node_feats=["feat"], prefetch_labels=["label"])

    def train_loader(self, rank_seeds, worker_init_fn):
        use_ddp = rank_seeds is None
        seeds = as_tensor(self.graph.train_idx) if use_ddp else torch.as_tensor(rank_seeds)
        kwargs = {}
        if self.cfg.workers > 0:
            kwargs = {"persistent_workers": True, "worker_init_fn": worker_init_fn}
        return dgl.dataloading.DataLoader(
            self.g, seeds, self._sampler(), device="cpu", use_ddp=use_ddp and self.world_size > 1,
            ddp_seed=self.cfg.seed, batch_size=self.cfg.batch_size, shuffle=True, drop_last=False,
            num_workers=self.cfg.workers, **kwargs,
        )

    def study_train_loader(self, worker_init_fn):
        # PyTorch's default non-persistent workers, as the study left them: forked afresh every epoch.
        kwargs = {"worker_init_fn": worker_init_fn} if self.cfg.workers > 0 else {}
        return dgl.dataloading.DataLoader(
            self.g, as_tensor(self.graph.train_idx), self._sampler(), device="cpu",
            batch_size=self.cfg.batch_size, shuffle=True, drop_last=False, num_workers=self.cfg.workers, **kwargs)

    def study_eval_loader(self):
        return self.eval_loader(self.graph.val_idx)

    def start_epoch(self, loader, epoch: int) -> None:
        # DGL's node DataLoader reshuffles its DDP share on every iteration by itself
        # (numpy's generator, seeded by the harness); older releases need set_epoch.
        if getattr(loader, "use_ddp", False) and hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)

    def eval_loader(self, seeds):
        return dgl.dataloading.DataLoader(self.g, torch.as_tensor(seeds), self._sampler(), device="cpu",
                                          batch_size=self.cfg.eval_batch_size, shuffle=False,
                                          drop_last=False, num_workers=0)

    def unpack(self, raw) -> Batch:
        input_nodes, output_nodes, blocks = raw
        edges = sum(int(b.num_edges()) for b in blocks)
        x = blocks[0].srcdata["feat"]
        y = blocks[-1].dstdata["label"]
        if self.gat_loops:
            blocks = [add_self_loops(b) for b in blocks]
        return Batch(inputs=(blocks, x), labels=y, seed_nodes=int(output_nodes.numel()),
                     sampled_nodes=int(input_nodes.numel()), sampled_edges=edges)

    def to_device(self, batch: Batch) -> Batch:
        if self.device.type == "cpu":
            return batch
        blocks, x = batch.inputs
        batch.inputs = ([b.to(self.device) for b in blocks], x.to(self.device, non_blocking=True))
        batch.labels = batch.labels.to(self.device, non_blocking=True)
        return batch

    def forward(self, model, inputs):
        blocks, x = inputs
        return model(blocks, x)


ADAPTER = DglAdapter
