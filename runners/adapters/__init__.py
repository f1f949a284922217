"""Framework adapters: the only place where PyG- or DGL-specific code lives.

An adapter turns the canonical graph into the framework's graph object, builds the
framework's neighbour-sampling loader and model, and unpacks a mini-batch. The shared
harness (`runners.harness`) drives both adapters through the same `Adapter` interface, so
both frameworks are timed and probed by the same code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass
class Batch:
    """A mini-batch as the harness sees it, whatever the framework."""

    inputs: Any  # what the adapter's forward() takes
    labels: Any  # labels of the seed nodes
    seed_nodes: int
    sampled_nodes: int  # distinct nodes whose input features the batch gathered
    sampled_edges: int  # edges of the sampled subgraph over all layers (before self-loops)


class Adapter:
    """Interface of a framework adapter (see runners/adapters/pyg.py and dgl.py)."""

    name = "?"
    # True when the framework splits the training seeds across ranks itself (DGL's use_ddp).
    splits_seeds_itself = False
    # What the harness records as this adapter's measurement choices.
    choices: dict = {}

    def __init__(self, cfg, graph, rank: int, world_size: int, device):
        self.cfg, self.graph, self.rank, self.world_size, self.device = cfg, graph, rank, world_size, device

    def build_model(self):
        raise NotImplementedError

    def train_loader(self, rank_seeds, worker_init_fn):
        """The loader over this rank's training seeds. `rank_seeds` is None when the
        framework splits the seeds across ranks itself (DGL's use_ddp)."""
        raise NotImplementedError

    # The seed study's harness (runners/study_harness.py): True when the study built this
    # framework's training loader inside a LightningDataModule hook, where Lightning can
    # rebuild it with a DistributedSampler; False when it handed the loader to trainer.fit.
    study_loader_in_hook = False

    def study_train_loader(self, worker_init_fn):
        """The training loader over the WHOLE training split, built as the seed study built it
        (no split across ranks here: whether ranks share the work is up to Lightning)."""
        raise NotImplementedError

    def study_eval_loader(self):
        """The validation loader over the whole validation split, as the seed study built it."""
        raise NotImplementedError

    def start_epoch(self, loader, epoch: int) -> None:
        """Hook for per-epoch reshuffling of framework-side DDP splits."""

    def eval_loader(self, seeds):
        raise NotImplementedError

    def unpack(self, raw) -> Batch:
        raise NotImplementedError

    def to_device(self, batch: Batch) -> Batch:
        raise NotImplementedError

    def forward(self, model, inputs):
        """Logits of the seed nodes."""
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        """Seed the framework's own random generators (beyond torch/numpy/random)."""


def layer_shapes(model: str, in_dim: int, hidden: int, out_dim: int, layers: int, heads: int) -> list:
    """(in, out, heads) of every layer; both frameworks' models are built from this list."""
    width = hidden * (heads if model == "gat" else 1)  # GAT concatenates its heads
    dims = [in_dim] + [width] * (layers - 1)
    return [(dims[i], out_dim if i == layers - 1 else hidden, 1 if i == layers - 1 else heads)
            for i in range(layers)]


def between_layers(x, model: str, dropout: float, training: bool):
    """Activation and dropout between two layers, the same code for both frameworks."""
    import torch.nn.functional as F

    x = F.relu(x) if model == "sage" else F.elu(x)
    return F.dropout(x, p=dropout, training=training)


def init_canonical(params, seed: int) -> None:
    """Initialise a model's parameters identically in both frameworks.

    `params` lists (role, tensor) in a framework-independent order (per layer: neighbour
    weight, root weight, bias for SAGE; weight, source attention, destination attention,
    bias for GAT). Drawing them in that order from one generator gives a PyG model and a DGL
    model the very same starting weights for the same seed, so accuracy differences can't come
    from the frameworks' different default initialisers.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for role, tensor in params:
            if role == "bias":
                tensor.zero_()
                continue
            flat = tensor.view(-1, tensor.shape[-1]) if tensor.dim() > 2 else tensor
            fan_out, fan_in = (flat.shape[0], flat.shape[1]) if flat.dim() == 2 else (1, flat.numel())
            bound = (6.0 / (fan_in + fan_out)) ** 0.5  # Glorot/Xavier uniform
            tensor.copy_(torch.rand(tensor.shape, generator=gen) * 2 * bound - bound)


def get_adapter_class(framework: str):
    module = importlib.import_module(f"runners.adapters.{framework}")
    return module.ADAPTER
