"""Every framework and every model of the suite, declared once.

Importable without torch, PyG or DGL: the launcher's option checks, Snakemake at parse
time and the analysis read it. Everything that lists frameworks or models derives from
here: the runner's allowed values and per-model defaults (runners/config.py), the analysis'
order, labels and colours (analysis/__init__.py), the Snakemake wildcards
(workflows/rules/common.smk) and the report's comparisons. The JSON/YAML schemas keep
literal lists (they are data); tests/test_registry.py fails when they or a config drift.

Adding a model: declare it in MODELS, give each adapter a builder for it (its
`MODEL_BUILDERS`), and add it to the schemas' lists. Adding a framework: declare it in
FRAMEWORKS and write its adapter module (ADAPTER, MODEL_BUILDERS, self_check).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Framework:
    name: str  # used on the command line, in run ids and in result.json
    label: str  # shown in tables and plots
    colour: str  # its colour in every plot
    adapter: str  # module with ADAPTER, MODEL_BUILDERS and self_check() (the doctor's check)
    # Fan-out order the framework's sampler expects. The suite's own order is the hop
    # nearest the seeds first (PyG's num_neighbors); DGL's NeighborSampler lists it last.
    seeds_hop_first: bool
    # No seed-split entry: the harness splits the training seeds for every framework (a
    # fresh equal share per rank and epoch), so all frameworks train the same shares.

    def framework_fanouts(self, fanouts) -> list:
        """The suite's fan-outs (hop nearest the seeds first) in this framework's order."""
        return list(fanouts) if self.seeds_hop_first else list(reversed(fanouts))


@dataclass(frozen=True)
class Model:
    name: str
    label: str
    # Per-model defaults of the run settings below (`settings`); any can be overridden.
    defaults: dict
    defaults_source: str  # where the defaults come from
    activation: str  # between layers: "relu" or "elu"
    # Attention heads are concatenated between layers (the hidden width is hidden x heads).
    concat_heads: bool = False
    # The model attends to / averages over the node itself; --no-self-loops switches it off.
    self_loops: bool = False
    settings: tuple = field(default=("layers", "hidden", "dropout"))


FRAMEWORKS = {
    f.name: f for f in (
        Framework("pyg", "PyG", "#3b75af", "runners.adapters.pyg", seeds_hop_first=True),
        Framework("dgl", "DGL", "#ef8636", "runners.adapters.dgl", seeds_hop_first=False),
    )
}

MODELS = {
    m.name: m for m in (
        Model("sage", "GraphSAGE", {"layers": 3, "hidden": 256, "heads": 1, "dropout": 0.5},
              "seed study, Table 1", activation="relu"),
        Model("gat", "GAT", {"layers": 3, "hidden": 16, "heads": 1, "dropout": 0.6},
              "seed study, Table 1", activation="elu", concat_heads=True, self_loops=True,
              settings=("layers", "hidden", "heads", "dropout")),
        # Not in the seed study: GraphSAGE's Table-1 row (3 layers, 256 hidden, dropout 0.5),
        # so that GCN and GraphSAGE differ only in their layer. The layer is the mean over
        # the node and its sampled in-neighbours (see the adapters for why not the symmetric
        # normalisation).
        Model("gcn", "GCN", {"layers": 3, "hidden": 256, "heads": 1, "dropout": 0.5},
              "this suite: GraphSAGE's Table-1 row", activation="relu", self_loops=True),
    )
}

FRAMEWORK_NAMES = tuple(FRAMEWORKS)
MODEL_NAMES = tuple(MODELS)


def framework(name: str) -> Framework:
    """The declaration of framework `name`; an unknown name raises, naming the allowed ones."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ValueError(f"framework {name!r} is unknown; allowed: {', '.join(FRAMEWORK_NAMES)}") from None


def model(name: str) -> Model:
    """The declaration of model `name`; an unknown name raises, naming the allowed ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"model {name!r} is unknown; allowed: {', '.join(MODEL_NAMES)}") from None


def wildcard_pattern(names) -> str:
    """A regular expression matching exactly one of `names` (for Snakemake wildcards)."""
    import re

    return "|".join(re.escape(n) for n in names)
