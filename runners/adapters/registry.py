"""Every framework and every model of the suite, declared once.

Importable without torch, PyG or DGL: the launcher's option checks, Snakemake at parse
time and the analysis read it. Everything that lists frameworks or models derives from
here: the runner's allowed values (runners/settings.py) and per-model defaults (RunConfig),
the analysis' order, labels and colours (analysis/__init__.py), the Snakemake wildcards
(runners/sweep.py) and the report's comparisons. The JSON/YAML schemas keep
literal lists (they are data); tests/test_registry.py fails when they or a config drift.

Adding a model: declare it in MODELS, give each adapter a builder for it (its
`MODEL_BUILDERS`), and add it to the schemas' lists. Adding a framework: declare it in
FRAMEWORKS (what the launcher must know without importing it: its packages, environment
facts and checks, memory traits) and write its adapter module (ADAPTER, MODEL_BUILDERS,
self_check); the analysis compares it with REFERENCE_FRAMEWORK (reference_pairs).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass(frozen=True)
class Framework:
    name: str  # used on the command line, in run ids and in result.json
    label: str  # shown in tables and plots
    colour: str  # its colour in every plot
    adapter: str  # module with ADAPTER, MODEL_BUILDERS and self_check() (the doctor's check)
    # The framework's neighbour-sampling loaders, by the name `--loader` takes; the first is
    # the default (a run that names none trains with it, and its identity stays as before).
    loaders: tuple
    # Fan-out order the framework's sampler expects. The suite's own order is the hop
    # nearest the seeds first (PyG's num_neighbors); DGL's NeighborSampler lists it last.
    seeds_hop_first: bool
    # No seed-split entry: the harness splits the training seeds for every framework (a
    # fresh equal share per rank and epoch), so all frameworks train the same shares.
    # result.json env key -> the distribution names its version may be installed under.
    packages: dict = field(default_factory=dict)
    # result.json env key -> a light probe of the installation (no framework import).
    env_facts: dict = field(default_factory=dict)
    env_vars: tuple = ()  # environment variables of the framework that each rank records
    # (device type, the launcher's env) -> (why the run is refused, or None; a note, or None)
    check_environment: Callable = lambda device_type, env: (None, None)
    # How the framework's loader uses host memory, for the launcher's memory model
    # (runners.memory): see MEMORY_TRAIT_KEYS.
    memory: dict = field(default_factory=dict)
    # The partitioned strategy (runners/partitioned/server.py): the module of its adapter, or why the
    # framework has none here (a run asking for it is refused with that reason).
    partitioned_adapter: Optional[str] = None
    partitioned_unavailable: str = ""
    # The run setting (runners.settings) that makes the framework compute each layer only on the
    # nodes the next layers still need (PyG's trim_to_layer), which a sweep times beside the
    # untrimmed runs (config `trim`); "" where the framework's layers shrink by themselves (DGL's
    # blocks) or it has no such switch.
    layer_trim: str = ""
    layer_trim_label: str = ""  # the trimming's own name, as the report says it

    @property
    def module(self) -> str:
        """What `import` names: the first entry of `packages` is the framework itself."""
        return next(iter(self.packages))

    @property
    def distributions(self) -> tuple:
        """The names the framework's own distribution may be installed under."""
        return self.packages[self.module]

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


def package_version(*names) -> Optional[str]:
    """The installed version of the first of `names` (a distribution's spellings) found."""
    import importlib.metadata as md

    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return None


def pyg_sampler_backend() -> str:
    """Which neighbour-sampling backend PyG's NeighborLoader will use ('none' if neither)."""
    if importlib.util.find_spec("pyg_lib") is not None:
        return "pyg-lib"
    if importlib.util.find_spec("torch_sparse") is not None:
        return "torch-sparse"
    return "none"


def dgl_has_cuda() -> Optional[bool]:
    """DGL's CUDA wheels carry a local version tag (2.1.0+cu121); the CPU wheel has none."""
    version = package_version("dgl")
    return None if version is None else "+cu" in version


def pyg_environment(device_type: str, env: dict) -> tuple:
    """Refuse PyG without a sampling backend; on GPUs, note a backend other than pyg-lib."""
    backend = env["pyg_sampler_backend"]
    if backend == "none":
        return ("--framework pyg: PyG's NeighborLoader needs pyg-lib or torch-sparse and neither is installed; "
                "run `make setup` (CPU) or see docs/setup.md, 'GPU machines'"), None
    if device_type == "cuda" and backend != "pyg-lib":
        # Sampling runs on the CPU either way, so torch-sparse serves a GPU run; the backend
        # changes the sampling cost, and it is recorded with the result (env, adapter choices).
        return None, (f"PyG samples with {backend} (pyg-lib is not installed; PyG prefers it when present, "
                      "see docs/setup.md, 'GPU machines'); recorded with the result")
    return None, None


def dgl_environment(device_type: str, env: dict) -> tuple:
    """Refuse a GPU run with DGL's CPU-only build."""
    if device_type == "cuda" and not env["dgl_cuda"]:
        return (f"--framework dgl on GPUs: the installed DGL {env['dgl']} is the CPU-only build; install DGL's "
                "CUDA build (docs/setup.md, 'GPU machines') or run with --device cpu"), None
    return None, None


# Memory traits (Framework.memory), measured or read from the frameworks' code:
# - copies_adjacency_with_workers: PyG's sampler calls share_memory_() on the CSC it samples
#   from when num_workers > 0, a copy into /dev/shm per rank (torch_geometric.sampler.utils.to_csc);
#   adjacency_copy_reason says so in the memory model's inputs.
# - workers_gather_features: PyG's workers collate whole batches (features included) and pass
#   them through shared memory; DGL's workers return the sampled blocks only and the rank
#   gathers the features itself (dgl.dataloading.dataloader._prefetch_update_feats, seen in
#   the main thread's stack).
# - edge_bytes: bytes per sampled edge of a batch's structure. PyG: edge_index (2 x int64) and
#   e_id; DGL: its blocks keep COO and compressed forms and edge ids: ~75 B/edge measured here
#   (8.15 GB of /dev/shm for 4 ranks x 8 workers x 3 waiting batches of 1.13 M edges, kernel
#   OOM report of the reddit-shape run in docs/memory.md).
# - all_nodes_every_layer: every layer runs on all sampled nodes (PyG unless --pyg-trim).
# - baseline_bytes: per-process baseline: the peak PSS of each process of a small run, sampled
#   with psutil every 0.3 s, measured here on 2026-11-23 (torch 2.2.1 CPU, PyG 2.8.1 +
#   torch-sparse, DGL 2.1.0):
#     python -m runners.run --framework F --model sage --devices 2 --batch-size 64 --workers 2 \
#         --dataset tiny --epochs 6 --out ...
#   DGL: agent 338 MiB, ranks 393/396, workers 125-128; PyG: agent 212, ranks 295/296, workers
#   111-112 (the tiny dataset adds < 1 MB). PSS splits pages shared by several processes
#   (torch's libraries) between them, so the agent's share depends on what else runs. See docs/memory.md.
# - shared_tensors_per_batch: tensors of one batch a worker hands to its rank, each an open
#   descriptor in the rank while the batch lives (runners.launch.descriptors): the deleted /dev/shm
#   files in /proc/PID/fd of a rank and a worker with one batch and without, measured here on
#   2026-11-24 (tiny, fan-outs 6,5,4, batch 128): PyG 7, DGL 18 (its blocks carry more tensors).
MEMORY_TRAIT_KEYS = ("copies_adjacency_with_workers", "adjacency_copy_reason", "workers_gather_features",
                     "edge_bytes", "all_nodes_every_layer", "baseline_bytes", "shared_tensors_per_batch")

FRAMEWORKS = {
    f.name: f for f in (
        Framework("pyg", "PyG", "#3b75af", "runners.adapters.pyg", loaders=("neighbor",), seeds_hop_first=True,
                  packages={"torch_geometric": ("torch_geometric", "torch-geometric"),
                            "pyg_lib": ("pyg_lib", "pyg-lib"), "torch_sparse": ("torch_sparse", "torch-sparse"),
                            "torch_scatter": ("torch_scatter", "torch-scatter")},
                  env_facts={"pyg_sampler_backend": pyg_sampler_backend},
                  check_environment=pyg_environment,
                  memory={"copies_adjacency_with_workers": True,
                          "adjacency_copy_reason": "PyG share_memory_() copies the adjacency to /dev/shm "
                                                   "once per rank with workers",
                          "workers_gather_features": True,
                          "edge_bytes": 24, "all_nodes_every_layer": True,
                          "baseline_bytes": {"agent": 212 * 2**20, "rank": 296 * 2**20, "worker": 112 * 2**20},
                          "shared_tensors_per_batch": 7},
                  layer_trim="pyg_trim", layer_trim_label="trim_to_layer",
                  partitioned_unavailable=(
                      "PyG's distributed engine cannot run in this suite's lanes: torch_geometric.distributed needs "
                      "pyg-lib (dist_neighbor_sample, relabel_neighborhood, merge_sampler_outputs), which is not on "
                      "the package index; in PyG 2.8.0 and 2.8.1 DistNeighborSampler.__init__ raises TypeError "
                      "(warn(..., stack_level=2)); and the package is deprecated since PyG 2.7")),
        # classic: dgl.dataloading.DataLoader; graphbolt: dgl.graphbolt's datapipe (DGL's examples
        # from 2.1 on). Both list the hop nearest the seeds last.
        Framework("dgl", "DGL", "#ef8636", "runners.adapters.dgl", loaders=("classic", "graphbolt"),
                  seeds_hop_first=False,
                  packages={"dgl": ("dgl",)}, env_facts={"dgl_cuda": dgl_has_cuda},
                  env_vars=("DGLBACKEND", "DGL_PREFETCHER_TIMEOUT"), check_environment=dgl_environment,
                  memory={"copies_adjacency_with_workers": False, "adjacency_copy_reason": None,
                          "workers_gather_features": False,
                          "edge_bytes": 75, "all_nodes_every_layer": False,
                          "baseline_bytes": {"agent": 338 * 2**20, "rank": 395 * 2**20, "worker": 126 * 2**20},
                          "shared_tensors_per_batch": 18},
                  partitioned_adapter="runners.adapters.dgl_dist"),
    )
}


def env_packages() -> tuple:
    """result.json env keys of the frameworks' packages: each framework's own first, then the others."""
    fws = FRAMEWORKS.values()
    return (*(f.module for f in fws), *(k for f in fws for k in f.packages if k != f.module))


def env_facts() -> tuple:
    """result.json env keys of the frameworks' installation facts (env_facts)."""
    return tuple(k for f in FRAMEWORKS.values() for k in f.env_facts)


def required_env() -> tuple:
    """The env keys every result must hold for the frameworks: each one's own version and its
    installation facts (runners.records.result adds them to the schema's env.required)."""
    return (*(f.module for f in FRAMEWORKS.values()), *env_facts())


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

# The framework every other one is compared with: the report's speed ratios, first-screen answers
# and the second round's repeats are each framework's time over this one's (PyG over DGL with the
# two of today). Where a sweep has no runs of it, the first framework present takes its place.
REFERENCE_FRAMEWORK = "dgl"


class _Names(Sequence):
    """The declared frameworks' names in declaration order, read from FRAMEWORKS at each use, so
    that a framework declared later (a test's, say) is listed wherever the names are read."""

    def __getitem__(self, i):
        return tuple(FRAMEWORKS)[i]

    def __len__(self) -> int:
        return len(FRAMEWORKS)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


FRAMEWORK_NAMES = _Names()
# Every loader name of every framework (--loader's choices; which framework offers which is
# checked with the framework, runners.config.check_combinations).
LOADER_NAMES = tuple(dict.fromkeys(name for f in FRAMEWORKS.values() for name in f.loaders))
# Loaders built as a pipeline of stages that run in the rank's own threads (DGL's GraphBolt: up
# to copy_to in a prefetch thread): --inject hang-pipeline stops one of their stages.
PIPELINE_LOADERS = ("graphbolt",)
# The source files a thread of such a pipeline runs in (torchdata's Prefetcher, which GraphBolt's
# DataLoader puts in front of copy_to): the watchdog recognises the thread by them in a stack dump.
PIPELINE_THREAD_FILES = ("torchdata/datapipes/iter/util/prefetcher.py",)
# The source file of the partitioned engine's RPC calls (DistDGL's recv_rpc_message and fast_pull,
# blocking in C): a trainer whose innermost frame is there waits for a graph server's answer; a graph
# server whose innermost frame is there waits for its next request (idle, not stuck).
RPC_WAIT_FILES = ("dgl/distributed/rpc.py",)
# The loaders that are not their framework's first (a sweep times them beside it: config loaders).
OTHER_LOADERS = tuple(dict.fromkeys(name for f in FRAMEWORKS.values() for name in f.loaders[1:]))
MODEL_NAMES = tuple(MODELS)
# The variant of a framework's runs with its layer trimming on (Framework.layer_trim): the run-name
# prefix's word ("trim-"), and the analysis' name for those runs beside the untrimmed ones.
LAYER_TRIM = "trim"
# The settings that switch a framework's layer trimming, by framework.
TRIM_SETTINGS = {f.name: f.layer_trim for f in FRAMEWORKS.values() if f.layer_trim}


def trims_layers(record) -> bool:
    """Whether a run (its config, or its runs.csv row) trimmed its layers: its framework's trimming
    setting (TRIM_SETTINGS) is on; False for a framework without one and for older results."""
    setting = TRIM_SETTINGS.get(str(record.get("framework")))
    return bool(setting) and str(record.get(setting)).lower() in ("true", "1", "1.0")


def reference_pairs(names) -> list:
    """(framework, reference) for each framework of `names` but the reference, in declaration order:
    what the analysis compares. The reference is REFERENCE_FRAMEWORK where `names` holds it, else
    the first of `names` in declaration order; fewer than two frameworks give no pair."""
    present = [f for f in FRAMEWORK_NAMES if f in set(names)]
    if len(present) < 2:
        return []
    ref = REFERENCE_FRAMEWORK if REFERENCE_FRAMEWORK in present else present[0]
    return [(f, ref) for f in present if f != ref]


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
