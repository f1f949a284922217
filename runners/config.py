"""One run's configuration: RunConfig, the runner's command line, and their validation.

Every setting is declared once, as a field of runners.settings.RunSettings: the command-line
options, the single-value checks and the sweep's flags derive from those fields. RunConfig adds
the values resolved from the machine; this module also holds what joins settings: the checks
across settings.

Both the launcher (`runners.run`) and every rank (`runners.rank.harness`, or `runners.rank.study`
for the seed study) read the same `RunConfig`, serialised to JSON in the run directory, so the
two can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from runners import settings
from runners.adapters import registry  # light: no torch, PyG or DGL
from runners.records.rundir import RunDir
from runners.settings import FAULTS, REQUIRED, STRATEGIES, ConfigError, parse_fanouts  # noqa: F401 (re-exported)

FAULTS_NEEDING_WORKERS = ("hang-worker", "kill-worker")
FAULTS_NEEDING_TWO_RANKS = ("uneven-batches",)
FAULTS_NEEDING_A_PIPELINE = ("hang-pipeline",)

# Per model (the seed study's Table 1, declared in the registry); any of them can be
# overridden on the command line.
MODEL_DEFAULTS = {name: dict(m.defaults) for name, m in registry.MODELS.items()}

# Fields that say where a run writes or how its processes meet, not what it measures: left
# out of a run's identity (every node of a multi-node run has the same identity). Every
# other field, present or added later, is part of it.
# How a run is launched, not what it measures.
NOT_IN_IDENTITY = ("out", "data_root", "master_addr", "master_port", "node_rank", "force_launch", "skip_unavailable",
                   "rank_starter", "ip_config", "wait")


@dataclass(frozen=True, kw_only=True)
class RunConfig(settings.RunSettings):
    """Every setting of one run (the fields of runners.settings.RunSettings) and the values the
    launcher resolves from the settings and the machine (config_from_args). Field names are
    the keys of result.json's `config`. Frozen: a changed value is a new RunConfig
    (dataclasses.replace). The model settings left None take the model's defaults from the
    registry.
    """

    # --fanouts in the framework's hop order
    fanouts_framework: list = field(default_factory=list, metadata={"column": True, "experiment": False})
    # --device resolved: cpu or cuda
    device_type: str = field(default="cpu", metadata={"column": True, "experiment": True})
    # the process group's: gloo on CPU, nccl on GPUs
    backend: str = field(default="gloo", metadata={"column": True, "experiment": False})
    # why the point is recorded as skipped, if it is
    skip_reason: Optional[str] = field(default=None, metadata={"column": False, "experiment": False})

    def __post_init__(self):
        for key, value in registry.model(self.model).defaults.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: set once, while being built

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "RunConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: Path) -> "RunConfig":
        return cls.from_json(json.loads(Path(path).read_text()))

    def identity(self, dataset_hash: str) -> dict:
        """The run's identity: every setting that distinguishes what it measures (all grid
        coordinates, the dataset and its content hash, training, probe and watchdog settings),
        as a readable run_id ending in a digest of them all. Runs with equal identities are
        the same measurement; the directory a run was written to plays no part."""
        settings = {k: v for k, v in self.to_json().items() if k not in NOT_IN_IDENTITY}
        # The framework's default loader is what every run trained with before --loader
        # existed: left out, so those runs keep their identities.
        default_loader = self.loader is None or self.loader == registry.framework(self.framework).loaders[0]
        if default_loader:
            settings.pop("loader", None)
        # Every run before --strategy replicated the graph: left out likewise (runners/partitioned/).
        replicated = self.strategy == STRATEGIES[0]
        if replicated:
            settings.pop("strategy", None)
            settings.pop("part_method", None)
        settings["dataset_hash"] = dataset_hash
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        nodes = f"x{self.nodes}" if self.nodes > 1 else ""
        lane = f"-{self.lane}" if self.lane not in (None, "pair") else ""
        loader = "" if default_loader else f"-{self.loader}"
        loader += "" if replicated else f"-part-{self.part_method}"
        run_id = (f"{self.dataset}-{self.framework}{loader}-{self.model}-d{self.devices}{nodes}"
                  f"-b{self.batch_size}-w{self.workers}-r{self.repeat}{lane}-{digest[:10]}")
        return {"run_id": run_id, "digest": digest, "settings": settings}

    def stop_rule(self):
        from runners.rank.stopping import StopRule

        return StopRule(until=self.until, precision=self.precision, min_steady_epochs=self.min_steady_epochs,
                        max_epochs=self.epochs, max_train_s=self.max_train_s)

    @property
    def world_size(self) -> int:
        return self.devices * self.nodes

    @property
    def fault_rank(self) -> int:
        """The rank a rank-level fault hits: the last rank unless chosen."""
        return self.inject_rank if self.inject_rank >= 0 else self.world_size - 1

    @property
    def collective_timeout_s(self) -> float:
        """PyTorch's own collective timeout: longer than anything the watchdog waits for.

        The watchdog stops a run at its time limit at the latest, so a hang is always caught
        (and diagnosed) by the watchdog before PyTorch's timeout turns it into a crash.
        """
        return self.time_limit_s + self.startup_timeout_s + self.stall_floor_s


def field_names(role: str) -> tuple:
    """RunConfig's fields declared with `role` ("column": a runs.csv column; "experiment": runs
    that differ in it are never mixed in one table cell), in field order."""
    return tuple(f.name for f in dataclasses.fields(RunConfig) if f.metadata[role])


NEGATIVE_LIST = re.compile(r"^-\d+(,-?\d+)+$")  # '-1,-1': argparse takes it for an option


class RunnerParser(argparse.ArgumentParser):
    """argparse, except that an option's value may be a list that starts with a negative number
    (`--fanouts -1,-1`, all neighbours): argparse reads only a lone negative number as a value."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        for i in range(len(args) - 1, 0, -1):
            action = self._option_string_actions.get(args[i - 1])
            if action is not None and action.nargs != 0 and NEGATIVE_LIST.match(args[i]):
                args[i - 1:i + 1] = [f"{args[i - 1]}={args[i]}"]
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    """The runner's command line: one option per declared setting (runners/settings.py)."""
    p = RunnerParser(
        prog="python -m runners.run",
        description="Run ONE configuration as real DDP training (its ranks started by runners.launch.spawn, "
        "or torchrun across nodes) and write a "
        "self-describing result directory, whatever happens.",
    )
    settings.add_options(p)
    return p


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def check_combinations(v: dict) -> None:
    """The rules that join settings (each setting alone is checked where it is declared)."""
    _require(v["rank_starter"] != "spawn" or v["nodes"] == 1,
             f"--rank-starter spawn: starts the ranks of one node only, not of --nnodes {v['nodes']}; "
             "use torchrun (or auto), whose rendezvous joins the nodes")
    _require(0 <= v["node_rank"] < v["nodes"],
             f"--node-rank {v['node_rank']}: must be in 0..{v['nodes'] - 1} for --nnodes {v['nodes']}")
    _require(v["nodes"] == 1 or v["master_port"] > 0,
             "--master-port is required for a multi-node run (every node must use the same one)")
    _require(v["until"] == "epochs" or v["epochs"] >= 1 + v["min_steady_epochs"],
             f"--epochs {v['epochs']}: with --until precise it caps the run and must allow the warm-up epoch "
             f"plus --min-steady-epochs {v['min_steady_epochs']}")
    _require(v["until"] == "epochs" or v["harness"] == "fair",
             f"--harness {v['harness']}: --until precise needs the fair harness (the study harness trains "
             "Lightning's fixed schedule)")
    _require(v["harness"] == "fair" or not (v["uneven_batches"] or v["inject"]),
             f"--harness {v['harness']}: --uneven-batches and --inject need the fair harness "
             "(the study harness builds its loaders exactly as the seed study did)")
    if v.get("loader") is not None:
        offered = registry.framework(v["framework"]).loaders
        _require(v["loader"] in offered,
                 f"--loader {v['loader']}: --framework {v['framework']} offers {', '.join(offered)}")
        _require(v["harness"] == "fair" or v["loader"] == offered[0],
                 f"--loader {v['loader']}: the study harness builds its loaders exactly as the seed study did "
                 f"({offered[0]}); use --harness fair")
    if v["strategy"] != STRATEGIES[0]:
        check_partitioned(v)
    _require(v["strategy"] != STRATEGIES[0] or v["part_method"] == settings.default("part_method"),
             f"--part-method {v['part_method']}: partitions the graph for --strategy partitioned only; "
             f"this run is --strategy {v['strategy']}")
    _require(v["strategy"] != STRATEGIES[0] or not v["ip_config"],
             f"--ip-config {v['ip_config']}: names the graph servers' hosts for --strategy partitioned only; "
             f"this run is --strategy {v['strategy']}")
    inject = v["inject"]
    if inject is not None:
        _require(v["allow_fault_injection"],
                 f"--inject {inject} needs --allow-fault-injection as well "
                 "(fault injection is for tests and demonstrations only)")
        _require(inject not in FAULTS_NEEDING_WORKERS or v["workers"] >= 1,
                 f"--inject {inject} acts on a loader worker and needs --workers >= 1, got --workers {v['workers']}")
        _require(inject not in FAULTS_NEEDING_TWO_RANKS or v["devices"] * v["nodes"] >= 2,
                 f"--inject {inject} needs at least 2 processes in all, got --devices {v['devices']}")
        _require(inject not in FAULTS_NEEDING_A_PIPELINE or v.get("loader") in registry.PIPELINE_LOADERS,
                 f"--inject {inject} stops a stage of a loader's pipeline and needs --loader "
                 f"{' or '.join(registry.PIPELINE_LOADERS)}, got --loader {v.get('loader') or 'the default'}")


def check_partitioned(v: dict) -> None:
    """What the partitioned strategy (runners.partitioned.server) cannot do, refused with the value and
    what is allowed."""
    f = registry.framework(v["framework"])
    if f.partitioned_adapter is None:
        raise ConfigError(f"--strategy partitioned: not available for --framework {v['framework']}: "
                          f"{f.partitioned_unavailable}")
    rules = (
        (v["workers"] == 0, f"--workers {v['workers']}: the partitioned strategy samples in the trainer (DGL's "
                            "num_samplers 0; its sampler processes hang, DGL #7753, #3887); allowed: 0"),
        (v["harness"] == "fair", f"--harness {v['harness']}: the partitioned strategy runs the fair harness only"),
        (v["loader"] in (None, f.loaders[0]), f"--loader {v['loader']}: the partitioned strategy samples with "
                                              "DistNodeDataLoader; leave --loader out"),
        (v["device"] != "cuda", "--device cuda: the partitioned strategy trains on CPU processes here "
                                "(DistNodeDataLoader samples on the CPU); allowed: cpu, auto"),
        (not v["uneven_batches"], "--uneven-batches: the partitioned strategy pads every trainer's share to "
                                  "the same number of batches (DGL #3538: uneven counts hang DDP)"),
        (v["nodes"] == 1 or v["ip_config"], f"--strategy partitioned --nnodes {v['nodes']}: needs --ip-config "
                                            "FILE naming every host's address, one line per node"),
    )
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)


def resolve_device(v: dict, visible_gpus: int) -> tuple:
    """(device type, skip reason): --device auto resolved, and a GPU count this node lacks
    refused, or recorded as the reason to skip the run with --skip-unavailable."""
    device = v["device"]
    if device == "auto":
        device = "cuda" if visible_gpus > 0 else "cpu"
    if device != "cuda":
        return device, None
    _require(visible_gpus > 0, "--device cuda: no GPU is visible (check nvidia-smi / CUDA_VISIBLE_DEVICES)")
    too_many = f"--devices {v['devices']}: only {visible_gpus} GPU(s) visible on this node; allowed: 1..{visible_gpus}"
    if v["devices"] > visible_gpus and v["skip_unavailable"]:
        return device, too_many
    _require(v["devices"] <= visible_gpus, too_many)
    return device, None


def check_dataset(name: str, data_root: str) -> None:
    """The suite's own dataset names, or one imported (runners.datasets import) or made as a twin
    (runners.datasets twin) under data_root; else ConfigError saying which are allowed and how to import one."""
    from runners import datasets  # light: numpy only

    try:
        datasets.check_name(name, data_root)
    except datasets.DatasetError as exc:
        raise ConfigError(f"--dataset {name!r} is unknown: {exc}") from None


def config_from_args(args: argparse.Namespace, visible_gpus: int, cpu_cores: int) -> RunConfig:
    """Validate the parsed options and resolve the automatic ones. Raises ConfigError."""
    v = settings.option_values(args)
    check_combinations(v)
    device, skip_reason = resolve_device(v, visible_gpus)
    out = Path(v["out"]).resolve()
    if v["nodes"] > 1 and v["node_rank"] > 0:
        # Nodes may share a file system: node 0 owns result.json, the others write beside it.
        out = RunDir(out).node(v["node_rank"]).path
    fields = {s.name for s in settings.SETTINGS if s.field}
    cfg = RunConfig(**{
        **{k: value for k, value in v.items() if k in fields},
        "out": str(out), "data_root": str(Path(v["data_root"]).resolve()),
        "device_type": device, "backend": "nccl" if device == "cuda" else "gloo", "skip_reason": skip_reason,
        "breakdown": v["probes"] and {"auto": device == "cpu", "on": True, "off": False}[v["breakdown"]],
        "threads_per_rank": v["threads_per_rank"] or max(1, cpu_cores // v["devices"]),
        "uneven_batches": v["uneven_batches"] or v["inject"] == "uneven-batches",
        "fanouts_framework": registry.framework(v["framework"]).framework_fanouts(v["fanouts"]),
        "loader": v["loader"] or registry.framework(v["framework"]).loaders[0],
    })
    check_dataset(cfg.dataset, cfg.data_root)
    # The model's layers are known once its defaults are filled in.
    _require(len(cfg.fanouts) == cfg.layers,
             f"--fanouts {args.fanouts!r} has {len(cfg.fanouts)} hops but the model has {cfg.layers} layers; "
             f"give one fan-out per layer")
    return cfg
