"""Framework adapters: the only place where PyG- or DGL-specific code lives.

An adapter turns the canonical graph into the framework's graph object, builds the
framework's neighbour-sampling loader and model, and unpacks a mini-batch. The shared
harness (`runners.rank.harness`) drives both adapters through the same `Adapter` interface, so
both frameworks are timed and probed by the same code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from runners.adapters import registry


class LayerWork(NamedTuple):
    """What one layer of the model computes on in one step: the rows it reads (source nodes),
    the rows it writes (destination nodes: the linear parts' work) and the edges it passes
    messages over (before self-loops, which add one per destination node in both frameworks)."""

    src_nodes: int
    dst_nodes: int
    edges: int


def block_work(blocks) -> tuple:
    """LayerWork of DGL message-flow blocks, first layer first (a block's own counts)."""
    return tuple(LayerWork(int(b.num_src_nodes()), int(b.num_dst_nodes()), int(b.num_edges())) for b in blocks)


@dataclass
class Batch:
    """A mini-batch as the harness sees it, whatever the framework."""

    inputs: Any  # what the adapter's forward() takes
    labels: Any  # labels of the seed nodes
    seed_nodes: int
    sampled_nodes: int  # distinct nodes whose input features the batch gathered
    sampled_edges: int  # edges of the sampled subgraph over all layers (before self-loops)
    seed_ids: Any = None  # the seed node ids (CPU tensor): what the loader really delivered
    layers: tuple = ()  # LayerWork per layer, first layer first: what the model computes on
    feature_bytes: int = 0  # bytes of input features the batch gathered

    def work(self) -> dict:
        """The step's work columns (runners.records.rank_rows.WORK_FIELDS): counts, per-layer sums and
        the per-layer lists (';'-joined, first layer first)."""
        per = {k: [getattr(w, k) for w in self.layers] for k in LayerWork._fields}
        return {"seed_nodes": self.seed_nodes, "sampled_nodes": self.sampled_nodes,
                "sampled_edges": self.sampled_edges, "feature_bytes": int(self.feature_bytes),
                **{f"layer_{k}": sum(v) for k, v in per.items()},
                **{f"{k}_by_layer": ";".join(map(str, v)) for k, v in per.items()}}


# How each framework's loader uses host memory, for the launcher's memory model
# (runners.memory): declared with each framework in the registry (import-free).
MEMORY_TRAITS = {name: f.memory for name, f in registry.FRAMEWORKS.items()}


class Adapter:
    """Interface of a framework adapter (see runners/adapters/pyg.py and dgl.py)."""

    name = "?"
    # What the harness records as this adapter's measurement choices.
    choices: dict = {}

    def __init__(self, cfg, graph, rank: int, world_size: int, device):
        self.cfg, self.graph, self.rank, self.world_size, self.device = cfg, graph, rank, world_size, device

    def build_model(self):
        raise NotImplementedError

    def train_loader(self, rank_seeds, worker_init_fn):
        """The loader over this rank's training seeds, in the order given and without
        shuffling. `rank_seeds` is a shared-memory int64 tensor that the harness rewrites in
        place before every epoch (its new share and order), so the loader must index it
        rather than copy it: persistent workers see the rewrite."""
        raise NotImplementedError

    # The seed study's harness (runners/rank/study.py): True when the study built this
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

    # Optional hooks of an adapter (the partitioned one has them; the harness looks them up):
    # before_process_group(cfg), a static method: start the framework's services that must come
    # before torch's process group; epoch_share(epoch): this rank's canonical training seeds in
    # `epoch`, where the adapter decides them; close(): leave those services after training.


def layer_shapes(model: str, in_dim: int, hidden: int, out_dim: int, layers: int, heads: int) -> list:
    """(in, out, heads) of every layer; both frameworks' models are built from this list."""
    width = hidden * (heads if registry.model(model).concat_heads else 1)
    dims = [in_dim] + [width] * (layers - 1)
    return [(dims[i], out_dim if i == layers - 1 else hidden, 1 if i == layers - 1 else heads)
            for i in range(layers)]


def between_layers(x, model: str, dropout: float, training: bool):
    """Activation and dropout between two layers, the same code for both frameworks."""
    import torch.nn.functional as F

    activation = {"relu": F.relu, "elu": F.elu}[registry.model(model).activation]
    x = activation(x)
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


class ModelBuilder(NamedTuple):
    """How an adapter builds one layer of a model (an entry of its MODEL_BUILDERS)."""

    build: Callable  # (in_dim, out_dim, heads, dropout, self_loops) -> the framework's conv
    parameters: Callable  # conv -> [(role, tensor)] in init_canonical's framework-independent order
    layer: str = ""  # the framework's layer and its settings (recorded as the adapter choice "layer")
    self_loops: Optional[str] = None  # how the layer gets self-loops (recorded as an adapter choice)


def model_builder(builders: dict, framework: str, model: str) -> ModelBuilder:
    """The adapter's builder for `model`; a model it has no builder for raises, naming the
    ones it has (never a silent fall-back to another model)."""
    registry.model(model)  # an unknown name says which models exist
    try:
        return builders[model]
    except KeyError:
        raise ValueError(f"the {framework} adapter has no builder for model {model!r}; "
                         f"it builds: {', '.join(builders)}") from None


def layer_choice(builders: dict, model: str) -> str:
    """The adapter choice "layer": 'GraphSAGE: SAGEConv(aggr="mean")'."""
    return f"{registry.model(model).label}: {builders[model].layer}"


def shared_tensor(arr):
    """torch.from_numpy on a (possibly read-only memory-mapped) array, without a copy.

    torch warns about non-writable arrays because it has no read-only tensors; these tensors
    are inputs that nothing writes to. Writing to one would fault, not corrupt the dataset.
    """
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr)


def get_adapter_class(framework: str, strategy: str = "replicated"):
    """The framework's adapter class; for the partitioned strategy its partitioned adapter."""
    f = registry.framework(framework)
    if strategy == "partitioned" and f.partitioned_adapter is None:
        raise ValueError(f"--strategy partitioned: not available for {framework}: {f.partitioned_unavailable}")
    module = importlib.import_module(f.partitioned_adapter if strategy == "partitioned" else f.adapter)
    return module.ADAPTER
