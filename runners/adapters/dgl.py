"""DGL adapter: blocks from either of DGL's loaders (`--loader`), SAGEConv/GATConv/GraphConv.

Loaders: `classic` is dgl.dataloading.DataLoader with NeighborSampler; `graphbolt` is the
dgl.graphbolt pipeline of DGL's examples from 2.1 on (ItemSampler -> sample_neighbor ->
fetch_feature -> copy_to -> gb.DataLoader). Both sample without replacement (unless
--replace) from the same CSC graph, with the same fan-outs (hop nearest the seeds last for
both), over the harness's seed share, and train the same model on the blocks.

Measurement choices (recorded in every result):
- The graph is built from the memory-mapped CSC with only the CSC format materialised
  (neighbour sampling reads in-edges).
- Seeds are split across ranks by the harness (a fresh padded share per rank every epoch,
  the same shares the PyG adapter trains). DGL's multi-GPU example uses `use_ddp=True`
  instead, which pads the same way but draws its own permutation (and, with persistent
  workers, never shows the workers a reshuffled DDP share); the split is index bookkeeping
  and costs the same either way.
- Blocks shrink layer by layer (DGL's message-flow graphs).
- GAT self-attention: DGL's GATConv has no self-loop option, so each sampled block gets one
  self-loop edge per destination node, which is what PyG's GATConv(add_self_loops=True)
  does on its subgraph.
- GCN: GraphConv(norm='right') on blocks with the same self-loops: the mean over each
  destination and its sampled in-neighbours. Not norm='both': its source side uses the
  source's out-degree in the block, which PyG's GCNConv normalisation (in-degrees on the
  whole subgraph) does not, so the two would be different functions.
- Seed-study harness (`--harness study`): the graph gets one self-loop edge per node, as the
  study loaded Reddit (`RedditDataset(self_loop=True)`), so the sampler may draw a node as its
  own neighbour and blocks get no extra self-loops; the DataLoader over the whole training
  split is built without use_ddp and handed to trainer.fit, as the study did. Its dataset is
  iterable, so Lightning leaves it unsharded and every rank trains the whole split.
"""

from __future__ import annotations

import os
import threading

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import dgl.graphbolt as gb  # noqa: E402  (import dgl imports it already)
import torch  # noqa: E402
from dgl.nn.pytorch import GATConv, GraphConv, SAGEConv  # noqa: E402
from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES, ShardingFilterIterDataPipe  # noqa: E402

from runners.adapters import (Adapter, Batch, ModelBuilder, between_layers, block_work, layer_choice,  # noqa: E402
                              layer_shapes, model_builder, shared_tensor)
from runners.adapters.registry import MODELS  # noqa: E402
from runners.adapters.dgl_data import to_dgl_graph  # noqa: E402


def require_cuda_build() -> None:
    """Refuse a GPU benchmark with DGL's CPU-only build (its wheels carry no +cuXXX tag)."""
    from runners.adapters.registry import dgl_has_cuda

    if not dgl_has_cuda():
        raise RuntimeError(
            f"DGL {dgl.__version__} is a CPU-only build; a GPU run needs DGL's CUDA build from "
            "DGL's own wheel index (see docs/setup.md, 'GPU machines')"
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


# model name -> how to build one layer (adapters.ModelBuilder). Self-loops are the
# adapter's: each sampled block gets one per destination node (see unpack).
MODEL_BUILDERS = {
    "sage": ModelBuilder(lambda d_in, d_out, h, dropout, loops: SAGEConv(d_in, d_out, "mean"),
                         lambda c: [("weight", c.fc_neigh.weight), ("weight", c.fc_self.weight),
                                    ("bias", c.fc_self.bias)],
                         "SAGEConv('mean')"),
    "gat": ModelBuilder(lambda d_in, d_out, h, dropout, loops: GATConv(d_in, d_out, num_heads=h, attn_drop=dropout,
                                                                       allow_zero_in_degree=True),
                        lambda c: [("weight", c.fc.weight), ("att", c.attn_l), ("att", c.attn_r), ("bias", c.bias)],
                        "GATConv, heads flattened, attn_drop = dropout",
                        "one self-loop per destination added to each block"),
    "gcn": ModelBuilder(lambda d_in, d_out, h, dropout, loops: GraphConv(d_in, d_out, norm="right",
                                                                         allow_zero_in_degree=True),
                        # GraphConv's weight is (in, out): its transpose is PyG's (out, in) weight.
                        lambda c: [("weight", c.weight.t()), ("bias", c.bias)],
                        "GraphConv(norm='right'): mean over the node and its sampled in-neighbours",
                        "one self-loop per destination added to each block"),
}


class DglModel(torch.nn.Module):
    """A stack of DGL convolutions over blocks, built by MODEL_BUILDERS[model] from layer_shapes()."""

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 heads: int, dropout: float):
        super().__init__()
        spec = model_builder(MODEL_BUILDERS, "dgl", model)
        self._params = spec.parameters
        self.kind, self.dropout = model, dropout
        self.convs = torch.nn.ModuleList(
            spec.build(d_in, d_out, h, dropout, True)
            for d_in, d_out, h in layer_shapes(model, in_dim, hidden, out_dim, layers, heads))

    def canonical_parameters(self) -> list:
        """(role, tensor) in the framework-independent order of adapters.init_canonical."""
        return [p for conv in self.convs for p in self._params(conv)]

    def forward(self, blocks, x):
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = conv(block, x)
            x = x.flatten(1)  # attention heads (node, head, feature) side by side
            if i < len(self.convs) - 1:
                x = between_layers(x, self.kind, self.dropout, self.training)
        return x


class DglAdapter(Adapter):
    name = "dgl"

    def __init__(self, cfg, graph, rank, world_size, device):
        super().__init__(cfg, graph, rank, world_size, device)
        if device.type == "cuda":
            require_cuda_build()
        self.study = cfg.harness == "study"
        self.graphbolt = cfg.loader == "graphbolt"
        if self.graphbolt:
            self._set_up_graphbolt()
        else:
            g = to_dgl_graph(graph)
            if self.study:
                g = dgl.add_self_loop(g)  # RedditDataset(self_loop=True), as the seed study loaded it
            self.g = g.formats(["csc"])
        # The study's graph already has self-loops: its blocks get none added.
        self.loops = MODELS[cfg.model].self_loops and cfg.self_loops and not self.study
        self.choices = {
            "loader": cfg.loader,
            "graph_input": "dgl.graph(('csc', ...)) on the memory-mapped CSC, csc format only",
            "sampler": "dgl.dataloading.NeighborSampler + DataLoader",
            "layer_compute": "blocks shrink layer by layer",
            "neighbourhoods": "sampled afresh for every destination node of every layer",
            "seed_split": ("none: every rank iterates the whole split (loader without use_ddp passed to "
                           "trainer.fit, as the seed study did)" if self.study
                           else "harness: fresh equal padded share per rank every epoch (same as PyG)"),
            "self_loops": ("graph-level self-loop on every node (dgl.add_self_loop, as RedditDataset("
                           "self_loop=True)); sampled like any edge" if self.study
                           else MODEL_BUILDERS[cfg.model].self_loops if self.loops else "none"),
            "layer": layer_choice(MODEL_BUILDERS, cfg.model),
            # prefetch_node_feats: DGL's loader gathers the features in the training process
            # even when workers sample (on CPU without a prefetch thread, inside next(), so it
            # shows as loader wait); PyG gathers them where it samples.
            "feature_gather": ("in the training process inside next() (prefetch_node_feats), sampling in "
                               "the loader workers" if cfg.workers
                               else "in the training process inside next() (prefetch_node_feats)"),
            "batch_prepare": ("self-loops added to every block (timed as the prepare phase)" if self.loops
                              else "none (blocks used as sampled)"),
            "sampled_edges": "sum of the blocks' edges: a node's neighbours count once per layer they are sampled in",
        }

        if self.graphbolt:
            self.choices.update(graphbolt_choices(cfg))

    def _set_up_graphbolt(self) -> None:
        """The sampling graph and feature store, once per rank, over the memory-mapped arrays
        (no copy: the ranks share the dataset's pages through the page cache)."""
        self.sampling_graph = gb.fused_csc_sampling_graph(shared_tensor(self.graph.indptr),
                                                          shared_tensor(self.graph.indices))
        self.features = gb.BasicFeatureStore(
            {("node", None, "feat"): gb.TorchBasedFeature(shared_tensor(self.graph.features))})
        self.labels = shared_tensor(self.graph.labels)

    def seed(self, seed: int) -> None:
        dgl.seed(seed)
        if getattr(self, "graphbolt", False):
            gb.seed(seed)  # GraphBolt's samplers draw from their own generator

    def build_model(self):
        c = self.cfg
        return DglModel(c.model, self.graph.num_features, c.hidden, self.graph.num_classes,
                        c.layers, c.heads, c.dropout)

    def _sampler(self):
        return dgl.dataloading.NeighborSampler(list(self.cfg.fanouts_framework), replace=self.cfg.replace,
                                               prefetch_node_feats=["feat"], prefetch_labels=["label"])

    def _graphbolt_loader(self, seeds, batch_size: int, workers: int, worker_init_fn=None, train: bool = True):
        """DGL's example pipeline over `seeds` in their order (a plain ItemSampler without
        shuffling: the harness's share is already this rank's, shuffled). The ItemSet indexes
        `seeds` itself when an epoch starts, so the harness's in-place rewrite reaches it,
        in persistent workers too."""
        pipe = RankItemSampler(gb.ItemSet(seeds, names="seed_nodes"), batch_size=batch_size, shuffle=False,
                               drop_last=False)
        pipe = WorkerShardingFilter(pipe, self.world_size)
        pipe = pipe.sample_neighbor(self.sampling_graph, list(self.cfg.fanouts_framework), replace=self.cfg.replace)
        pipe = pipe.fetch_feature(self.features, node_feature_keys=["feat"])
        if train and self.cfg.inject == "hang-pipeline" and self.rank == self.cfg.fault_rank:
            pipe = pipe.transform(PipelineStall(self.cfg.inject_step))
        pipe = pipe.copy_to(self.device)  # as the example; its DataLoader prefetches up to here in a thread
        loader = gb.DataLoader(pipe, num_workers=workers, persistent_workers=workers > 0)
        if worker_init_fn is not None:
            # gb.DataLoader runs the sampling stages in a torch DataLoader of its own; give its
            # workers the harness's set-up (seeds, one thread, stack dumps, worker records).
            for wrapper in graphbolt_worker_loaders(loader):
                wrapper.dataloader.worker_init_fn = worker_init_fn
        return SizedLoader(loader, seeds, batch_size)

    def train_loader(self, rank_seeds, worker_init_fn):
        if self.graphbolt:
            return self._graphbolt_loader(rank_seeds, self.cfg.batch_size, self.cfg.workers, worker_init_fn)
        kwargs = {}
        if self.cfg.workers > 0:
            kwargs = {"persistent_workers": True, "worker_init_fn": worker_init_fn}
        # shuffle=False: DGL's dataset keeps `rank_seeds` itself (no copy) and each worker
        # indexes it when an epoch starts, so the harness's in-place rewrite reaches it.
        return dgl.dataloading.DataLoader(
            self.g, rank_seeds, self._sampler(), device="cpu", use_ddp=False,
            batch_size=self.cfg.batch_size, shuffle=False, drop_last=False,
            num_workers=self.cfg.workers, **kwargs,
        )

    def study_train_loader(self, worker_init_fn):
        # PyTorch's default non-persistent workers, as the study left them: forked afresh every epoch.
        kwargs = {"worker_init_fn": worker_init_fn} if self.cfg.workers > 0 else {}
        return dgl.dataloading.DataLoader(
            self.g, shared_tensor(self.graph.train_idx), self._sampler(), device="cpu",
            batch_size=self.cfg.batch_size, shuffle=True, drop_last=False, num_workers=self.cfg.workers, **kwargs)

    def study_eval_loader(self):
        return self.eval_loader(self.graph.val_idx)

    def eval_loader(self, seeds):
        if self.graphbolt:
            return self._graphbolt_loader(torch.as_tensor(seeds), self.cfg.eval_batch_size, 0, train=False)
        return dgl.dataloading.DataLoader(self.g, torch.as_tensor(seeds), self._sampler(), device="cpu",
                                          batch_size=self.cfg.eval_batch_size, shuffle=False,
                                          drop_last=False, num_workers=0)

    def unpack(self, raw) -> Batch:
        if self.graphbolt:
            # A GraphBolt MiniBatch: blocks, the fetched input features, and the seeds'
            # labels (the example carries them in its ItemSet; here a gather of batch size).
            input_nodes, output_nodes, blocks = raw.input_nodes, raw.seed_nodes, raw.blocks
            x = raw.node_features["feat"]
            y = self.labels[output_nodes]
        else:
            input_nodes, output_nodes, blocks = raw
            x = blocks[0].srcdata["feat"]
            y = blocks[-1].dstdata["label"]
        work = block_work(blocks)
        if self.loops:
            blocks = [add_self_loops(b) for b in blocks]
        return Batch(inputs=(blocks, x), labels=y, seed_nodes=int(output_nodes.numel()),
                     sampled_nodes=int(input_nodes.numel()), sampled_edges=sum(w.edges for w in work),
                     seed_ids=output_nodes,
                     layers=work, feature_bytes=x.numel() * x.element_size())

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


class RankItemSampler(gb.ItemSampler):
    """gb.ItemSampler over seeds that are already this rank's share (see WorkerShardingFilter).

    gb.DataLoader puts a sharding_filter after every stage whose type is exactly ItemSampler,
    and torch's DataLoader shards that filter by the process group's rank and size: under DDP a
    plain ItemSampler silently trains 1/world of the rank's batches (measured here: 5 of 10
    with 2 ranks, DGL 2.1.0, torch 2.2.1). A subclass is left alone."""


class WorkerShardingFilter(ShardingFilterIterDataPipe):
    """A sharding_filter that splits a rank's batches between its loader workers only.

    torch shards it as it would any filter: (world, rank) in the rank itself and
    (world x workers, worker x world + rank) in a worker; dividing both by the world size
    leaves (1, 0) and (workers, worker): each batch once, in order."""

    def __init__(self, source_datapipe, world_size: int):
        super().__init__(source_datapipe)
        self.world_size = world_size

    def apply_sharding(self, num_of_instances, instance_id, sharding_group=SHARDING_PRIORITIES.DEFAULT):
        super().apply_sharding(max(1, num_of_instances // self.world_size), instance_id // self.world_size,
                               sharding_group)


class SizedLoader:
    """A GraphBolt loader with a length: the harness counts a rank's steps before its first
    epoch (gb.DataLoader, over an iterable datapipe, has none). Iterating is the loader's own."""

    def __init__(self, loader, seeds, batch_size: int):
        self.loader, self.seeds, self.batch_size = loader, seeds, batch_size

    def __iter__(self):
        return iter(self.loader)

    def __len__(self) -> int:
        return -(-len(self.seeds) // self.batch_size)


def graphbolt_worker_loaders(loader) -> list:
    """The MultiprocessingWrapper stages gb.DataLoader inserted (the sampling that its workers run)."""
    import torchdata.dataloader2.graph as dp_graph
    from dgl.graphbolt.dataloader import MultiprocessingWrapper

    return dp_graph.find_dps(dp_graph.traverse_dps(loader.dataset), MultiprocessingWrapper)


class PipelineStall:
    """--inject hang-pipeline: a pipeline stage after feature fetching that never returns its
    `after`-th mini-batch (counted from 0 over the loader's life). It runs where GraphBolt runs
    that part of the pipeline, in the rank's prefetch thread, so the rank waits for a batch that
    never comes while its other threads stay alive: a hang inside GraphBolt's pipeline."""

    def __init__(self, after: int):
        self.after, self.seen = after, 0

    def __call__(self, minibatch):
        if self.seen == self.after:
            print(f"[gnnscale] injected fault hang-pipeline: GraphBolt's pipeline stops at mini-batch {self.seen}",
                  flush=True)
            threading.Event().wait()  # forever: the thread is alive, sleeping, and never returns
        self.seen += 1
        return minibatch


# How `--workers` maps onto GraphBolt's concurrency (recorded with every GraphBolt run).
GRAPHBOLT_PREFETCH_BUFFER = 2  # gb.DataLoader's Prefetcher in front of copy_to (DGL 2.1.0)


def graphbolt_choices(cfg) -> dict:
    """The adapter choices a GraphBolt run records over the classic loader's."""
    w = cfg.workers
    return {
        "sampler": ("dgl.graphbolt: ItemSampler over the harness's share -> sample_neighbor -> fetch_feature "
                    "-> copy_to -> gb.DataLoader (DGL's multi-GPU GraphBolt example)"),
        "graph_input": ("gb.fused_csc_sampling_graph on the memory-mapped CSC, built once per rank (no copy: "
                        "the ranks share the dataset's pages)"),
        "feature_gather": ("gb.BasicFeatureStore(TorchBasedFeature) over the memory-mapped features, fetched "
                           "in the rank's prefetch thread" + (", sampling in the loader workers" if w else "")),
        "concurrency": {
            "workers": w,
            "gb_dataloader_num_workers": w,
            "persistent_workers": w > 0,
            "prefetch_thread_buffer": GRAPHBOLT_PREFETCH_BUFFER,
            "mapping": (f"--workers {w} -> gb.DataLoader(num_workers={w}): "
                        + (f"{w} worker processes sample (ItemSampler + sample_neighbor), " if w else
                           "sampling in the rank, ")
                        + "the rank's torchdata Prefetcher thread (buffer 2) fetches features ahead of copy_to "
                        "in every case"),
        },
        "labels": "gathered for the seeds in the training process (the example's ItemSet carries them)",
    }


ADAPTER = DglAdapter
