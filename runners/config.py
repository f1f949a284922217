"""One run's configuration: the command-line options, their validation and defaults.

Both the launcher (`runners.run`) and every rank (`runners.worker`) read the same
`RunConfig`, serialised to JSON in the run directory, so the two can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from runners.adapters import registry  # light: no torch, PyG or DGL
from runners.stopping import UNTIL  # light: scipy only when the rule runs

FRAMEWORKS = registry.FRAMEWORK_NAMES
MODELS = registry.MODEL_NAMES
FAULTS = ("uneven-batches", "stall-rank", "freeze-rank", "hang-worker", "crash-rank", "kill-worker")
FAULTS_NEEDING_WORKERS = ("hang-worker", "kill-worker")
LR_SCALINGS = ("none", "linear")
DEVICE_CHOICES = ("auto", "cpu", "cuda")
# fair: the suite's own DDP loop (runners/harness.py); study: the seed study's Lightning
# harness, loaders built as it built them (runners/study_harness.py).
HARNESSES = ("fair", "study")

# Per model (the seed study's Table 1, declared in the registry); any of them can be
# overridden on the command line.
MODEL_DEFAULTS = {name: dict(m.defaults) for name, m in registry.MODELS.items()}


# Fields that say where a run writes or how its processes meet, not what it measures: left
# out of a run's identity (every node of a multi-node run has the same identity). Every
# other field, present or added later, is part of it.
NOT_IN_IDENTITY = ("out", "data_root", "master_addr", "master_port", "node_rank")


class ConfigError(ValueError):
    """A bad option value; the message names the option, the value and what is allowed."""


@dataclass
class RunConfig:
    """Every setting of one run. Field names are the keys of result.json's `config`.

    The field defaults are THE defaults of the runner's options (build_parser reads them);
    the model settings left None take the model's defaults from the registry.
    """

    framework: str
    model: str
    devices: int
    batch_size: int
    workers: int
    dataset: str
    epochs: int
    out: str
    fanouts: list = field(default_factory=lambda: [10, 10, 10])
    fanouts_framework: list = field(default_factory=list)
    repeat: int = 0
    seed: int = 0
    data_root: str = "results/datasets"
    device_type: str = "cpu"
    backend: str = "gloo"
    nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    layers: Optional[int] = None
    hidden: Optional[int] = None
    heads: Optional[int] = None
    dropout: Optional[float] = None
    lr: float = 5e-3
    weight_decay: float = 5e-4
    lr_scaling: str = "none"
    warmup_epochs: int = 0
    self_loops: bool = True
    replace: bool = False
    pyg_trim: bool = False
    breakdown: bool = True
    probes: bool = True
    cpu_sample_interval_s: float = 1.0
    nvml_sample_interval_s: float = 0.5
    eval_every: int | str = 1  # N: every N epochs and after the last; "end": after the last only; 0: never
    eval_batch_size: int = 4096
    uneven_batches: bool = False
    inject: Optional[str] = None
    inject_rank: int = -1
    inject_epoch: int = 0
    inject_step: int = 2
    threads_per_rank: int = 1
    time_limit_s: float = 3600.0
    stall_floor_s: float = 60.0
    stall_factor: float = 20.0
    startup_timeout_s: float = 600.0
    kill_grace_s: float = 5.0
    native_stacks: bool = False
    max_steps_per_epoch: int = 0
    # When training stops (runners.stopping): "epochs" trains exactly `epochs`; "precise" trains
    # until the steady-state epoch time is known to `precision` (relative 95 % half-width), with
    # `epochs` and `max_train_s` as caps.
    until: str = "epochs"
    precision: float = 0.03
    min_steady_epochs: int = 4  # see runners.stopping.StopRule
    max_train_s: float = 0.0
    skip_reason: Optional[str] = None
    memory_limit_bytes: int = 0  # 0: no cap; else the process tree runs in a memory cgroup

    harness: str = "fair"

    def __post_init__(self):
        for key, value in registry.model(self.model).defaults.items():
            if getattr(self, key) is None:
                setattr(self, key, value)

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
        settings["dataset_hash"] = dataset_hash
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        nodes = f"x{self.nodes}" if self.nodes > 1 else ""
        run_id = (f"{self.dataset}-{self.framework}-{self.model}-d{self.devices}{nodes}"
                  f"-b{self.batch_size}-w{self.workers}-r{self.repeat}-{digest[:10]}")
        return {"run_id": run_id, "digest": digest, "settings": settings}

    def stop_rule(self):
        from runners.stopping import StopRule

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


def default(name: str):
    """The default of RunConfig field `name` (the one place the runner's defaults live)."""
    f = RunConfig.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def parse_fanouts(text: str) -> list:
    """'15,10,5' -> [15, 10, 5]; each a positive integer (or -1 for all neighbours)."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip() != ""]
    except ValueError:
        raise ConfigError(f"--fanouts {text!r}: expected comma-separated integers such as 15,10,5")
    if not values or any(v == 0 or v < -1 for v in values):
        raise ConfigError(
            f"--fanouts {text!r}: each fan-out must be a positive integer or -1 (all neighbours)"
        )
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m runners.run",
        description="Run ONE configuration as real DDP training under torchrun and write a "
        "self-describing result directory, whatever happens.",
    )
    req = p.add_argument_group("the configuration")
    req.add_argument("--framework", required=True, help=f"one of {', '.join(FRAMEWORKS)}")
    req.add_argument("--model", required=True, help=f"one of {', '.join(MODELS)}")
    req.add_argument("--devices", type=int, required=True,
                     help="processes per node: GPUs when present, CPU processes otherwise")
    req.add_argument("--batch-size", type=int, required=True, help="seed nodes per process and step")
    req.add_argument("--workers", type=int, required=True, help="data-loader worker processes per rank")
    req.add_argument("--dataset", required=True, help="dataset name (see runners.datasets)")
    req.add_argument("--epochs", type=int, required=True,
                     help="epochs to train; with --until precise, the most epochs to train")
    req.add_argument("--out", required=True, help="run directory to write")
    opt = p.add_argument_group("training settings")
    opt.add_argument("--fanouts", default=",".join(str(f) for f in default("fanouts")),
                     help="neighbours per hop, hop nearest the seeds FIRST (PyG order); "
                     "translated for DGL. Length = number of layers")
    opt.add_argument("--repeat", type=int, default=default("repeat"), help="repeat index (changes nothing but the label)")
    opt.add_argument("--seed", type=int, default=default("seed"))
    opt.add_argument("--data-root", default=default("data_root"))
    opt.add_argument("--device", choices=DEVICE_CHOICES, default="auto",
                     help="auto: GPUs when visible, else CPU processes")
    opt.add_argument("--layers", type=int, default=None)
    opt.add_argument("--hidden", type=int, default=None)
    opt.add_argument("--heads", type=int, default=None)
    opt.add_argument("--dropout", type=float, default=None)
    opt.add_argument("--lr", type=float, default=default("lr"))
    opt.add_argument("--weight-decay", type=float, default=default("weight_decay"))
    opt.add_argument("--lr-scaling", default=default("lr_scaling"),
                     help="none, or linear: lr x processes with linear warm-up over --warmup-epochs")
    opt.add_argument("--warmup-epochs", type=int, default=default("warmup_epochs"))
    opt.add_argument("--no-self-loops", action="store_true",
                     help="GAT without self-attention edges (default: both frameworks add them)")
    opt.add_argument("--replace", action="store_true", help="sample neighbours with replacement")
    opt.add_argument("--pyg-trim", action="store_true",
                     help="PyG: trim each layer to the nodes it still needs (off as in PyG's DDP example)")
    opt.add_argument("--eval-every", default=default("eval_every"),
                     help="validate every N epochs and after the last; 'end': after the last epoch only; "
                     "0: never")
    stop = p.add_argument_group("when to stop (runners/stopping.py)")
    stop.add_argument("--until", default=default("until"),
                      help="epochs: train exactly --epochs; precise: train until the 95%% interval of the "
                      "steady-state epoch time is within --precision of its mean (at least "
                      "--min-steady-epochs after the warm-up epoch, no drift), --epochs and --max-train-time "
                      "being caps")
    stop.add_argument("--precision", type=float, default=default("precision"),
                      help="target relative half-width of the 95%% interval (0.03 = 3%%)")
    stop.add_argument("--min-steady-epochs", type=int, default=default("min_steady_epochs"))
    stop.add_argument("--max-train-time", type=float, default=default("max_train_s"),
                      help="seconds of training after which a precise run stops anyway (0: no cap)")
    opt.add_argument("--eval-batch-size", type=int, default=default("eval_batch_size"))
    opt.add_argument("--max-steps-per-epoch", type=int, default=default("max_steps_per_epoch"),
                     help="cap steps per epoch (0: the whole training split); for quick checks")
    opt.add_argument("--harness", default="fair",
                     help="fair: the suite's DDP loop, both frameworks split the seeds equally; study: "
                     "the seed study's PyTorch Lightning harness, loaders built as it built them")
    opt.add_argument("--uneven-batches", action="store_true",
                     help="naive split: the last rank gets one batch fewer (reproduces the DDP hang)")
    probe = p.add_argument_group("probes")
    probe.add_argument("--no-probes", action="store_true",
                       help="switch off the per-phase step timing, CPU and NVML samplers")
    probe.add_argument("--breakdown", choices=("auto", "on", "off"), default="auto",
                       help="split each step into phases; on GPUs this synchronises (auto: on for CPU)")
    probe.add_argument("--cpu-sample-interval", type=float, default=default("cpu_sample_interval_s"))
    probe.add_argument("--nvml-sample-interval", type=float, default=default("nvml_sample_interval_s"))
    probe.add_argument("--threads-per-rank", type=int, default=0,
                       help="intra-op threads per rank (0: cores // local processes)")
    wd = p.add_argument_group("watchdog")
    wd.add_argument("--time-limit", type=float, default=default("time_limit_s"), help="overall limit in seconds")
    wd.add_argument("--stall-floor", type=float, default=default("stall_floor_s"),
                    help="never declare a hang before this many seconds without progress")
    wd.add_argument("--stall-factor", type=float, default=default("stall_factor"),
                    help="hang = no progress for factor x the slowest step seen (at least the floor)")
    wd.add_argument("--startup-timeout", type=float, default=default("startup_timeout_s"),
                    help="seconds allowed from launch to the first step")
    wd.add_argument("--memory-limit", default=None, metavar="SIZE",
                    help="run the whole process tree (torchrun, ranks, loader workers) under this memory "
                    "cap, e.g. 512M or 2G, in a memory cgroup (needs root and a writable memory controller)")
    wd.add_argument("--native-stacks", action="store_true", help="also capture native stacks (py-spy --native)")
    wd.add_argument("--inject", default=None, help=f"fault injection: one of {', '.join(FAULTS)}")
    wd.add_argument("--allow-fault-injection", action="store_true",
                    help="required together with --inject, so no fault is switched on by accident")
    wd.add_argument("--inject-rank", type=int, default=default("inject_rank"))
    opt.add_argument("--skip-unavailable", action="store_true",
                     help="record a 'skipped' result instead of failing when this node has fewer GPUs "
                     "than --devices (what a sweep wants; on the command line the error is clearer)")
    mn = p.add_argument_group("multi-node (torchrun static rendezvous)")
    mn.add_argument("--nnodes", type=int, default=default("nodes"))
    mn.add_argument("--node-rank", type=int, default=default("node_rank"))
    mn.add_argument("--master-addr", default=default("master_addr"))
    mn.add_argument("--master-port", type=int, default=default("master_port"), help="0: pick a free port (single node only)")
    return p


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def config_from_args(args: argparse.Namespace, visible_gpus: int, cpu_cores: int) -> RunConfig:
    """Validate the parsed options and resolve the automatic ones. Raises ConfigError."""
    from runners import datasets  # light: numpy only

    _require(args.framework in FRAMEWORKS,
             f"--framework {args.framework!r} is unknown; allowed: {', '.join(FRAMEWORKS)}")
    _require(args.model in MODELS, f"--model {args.model!r} is unknown; allowed: {', '.join(MODELS)}")
    _require(args.dataset in datasets.DATASET_NAMES,
             f"--dataset {args.dataset!r} is unknown; allowed: {', '.join(datasets.DATASET_NAMES)}")
    _require(args.devices >= 1, f"--devices {args.devices}: must be at least 1")
    _require(args.batch_size >= 1, f"--batch-size {args.batch_size}: must be a positive integer")
    _require(args.workers >= 0, f"--workers {args.workers}: must be 0 or more")
    _require(args.epochs >= 1, f"--epochs {args.epochs}: must be at least 1")
    _require(args.nnodes >= 1, f"--nnodes {args.nnodes}: must be at least 1")
    _require(0 <= args.node_rank < args.nnodes,
             f"--node-rank {args.node_rank}: must be in 0..{args.nnodes - 1} for --nnodes {args.nnodes}")
    _require(args.nnodes == 1 or args.master_port > 0,
             "--master-port is required for a multi-node run (every node must use the same one)")
    _require(args.lr_scaling in LR_SCALINGS,
             f"--lr-scaling {args.lr_scaling!r}: allowed: {', '.join(LR_SCALINGS)}")
    _require(args.warmup_epochs >= 0, f"--warmup-epochs {args.warmup_epochs}: must be 0 or more")
    _require(args.time_limit > 0, f"--time-limit {args.time_limit}: must be positive")
    _require(args.stall_floor > 0, f"--stall-floor {args.stall_floor}: must be positive")
    _require(args.stall_factor >= 1, f"--stall-factor {args.stall_factor}: must be at least 1")
    eval_every = args.eval_every if args.eval_every == "end" else None
    if eval_every is None:
        try:
            eval_every = int(args.eval_every)
        except (TypeError, ValueError):
            eval_every = -1
        _require(eval_every >= 0, f"--eval-every {args.eval_every!r}: allowed: a whole number >= 0, or 'end'")
    _require(args.until in UNTIL, f"--until {args.until!r} is unknown; allowed: {', '.join(UNTIL)}")
    _require(0 < args.precision < 1, f"--precision {args.precision}: must be between 0 and 1 (0.03 = 3%)")
    _require(args.min_steady_epochs >= 2,
             f"--min-steady-epochs {args.min_steady_epochs}: must be at least 2 (an interval needs two epochs)")
    _require(args.max_train_time >= 0, f"--max-train-time {args.max_train_time}: must be 0 (no cap) or more")
    _require(args.until == "epochs" or args.epochs >= 1 + args.min_steady_epochs,
             f"--epochs {args.epochs}: with --until precise it caps the run and must allow the warm-up epoch "
             f"plus --min-steady-epochs {args.min_steady_epochs}")
    _require(args.until == "epochs" or args.harness == "fair",
             f"--harness {args.harness}: --until precise needs the fair harness (the study harness trains "
             "Lightning's fixed schedule)")
    _require(args.threads_per_rank >= 0, f"--threads-per-rank {args.threads_per_rank}: must be 0 or more")
    _require(args.harness in HARNESSES,
             f"--harness {args.harness!r} is unknown; allowed: {', '.join(HARNESSES)}")
    _require(args.harness == "fair" or not (args.uneven_batches or args.inject),
             f"--harness {args.harness}: --uneven-batches and --inject need the fair harness "
             "(the study harness builds its loaders exactly as the seed study did)")
    _require(args.max_steps_per_epoch >= 0,
             f"--max-steps-per-epoch {args.max_steps_per_epoch}: must be 0 or more")

    memory_limit = 0
    if getattr(args, "memory_limit", None) is not None:
        from runners.memory import MemoryLimitError, parse_size

        try:
            memory_limit = parse_size(args.memory_limit)
        except MemoryLimitError as exc:
            raise ConfigError(str(exc))

    defaults = MODEL_DEFAULTS[args.model]
    layers = args.layers if args.layers is not None else defaults["layers"]
    _require(layers >= 1, f"--layers {layers}: must be at least 1")
    fanouts = parse_fanouts(args.fanouts)
    _require(len(fanouts) == layers,
             f"--fanouts {args.fanouts!r} has {len(fanouts)} hops but the model has {layers} layers; "
             f"give one fan-out per layer")
    hidden = args.hidden if args.hidden is not None else defaults["hidden"]
    heads = args.heads if args.heads is not None else defaults["heads"]
    dropout = args.dropout if args.dropout is not None else defaults["dropout"]
    _require(hidden >= 1, f"--hidden {hidden}: must be positive")
    _require(heads >= 1, f"--heads {heads}: must be positive")
    _require(0.0 <= dropout < 1.0, f"--dropout {dropout}: must be in [0, 1)")

    if args.inject is not None:
        _require(args.inject in FAULTS, f"--inject {args.inject!r} is unknown; allowed: {', '.join(FAULTS)}")
        _require(args.allow_fault_injection,
                 f"--inject {args.inject} needs --allow-fault-injection as well "
                 "(fault injection is for tests and demonstrations only)")
        _require(args.inject not in FAULTS_NEEDING_WORKERS or args.workers >= 1,
                 f"--inject {args.inject} acts on a loader worker and needs --workers >= 1, "
                 f"got --workers {args.workers}")
        _require(args.inject not in ("uneven-batches", "stall-rank", "freeze-rank") or args.devices * args.nnodes >= 2,
                 f"--inject {args.inject} needs at least 2 processes in all, got --devices {args.devices}")

    device = args.device
    if device == "auto":
        device = "cuda" if visible_gpus > 0 else "cpu"
    skip_reason = None
    if device == "cuda":
        _require(visible_gpus > 0, "--device cuda: no GPU is visible (check nvidia-smi / CUDA_VISIBLE_DEVICES)")
        too_many = (f"--devices {args.devices}: only {visible_gpus} GPU(s) visible on this node; "
                    f"allowed: 1..{visible_gpus}")
        if args.devices > visible_gpus and getattr(args, "skip_unavailable", False):
            skip_reason = too_many
        else:
            _require(args.devices <= visible_gpus, too_many)
    breakdown = {"auto": device == "cpu", "on": True, "off": False}[args.breakdown]
    if args.no_probes:
        breakdown = False

    threads = args.threads_per_rank or max(1, cpu_cores // args.devices)
    out = Path(args.out).resolve()
    if args.nnodes > 1 and args.node_rank > 0:
        # Nodes may share a file system: node 0 owns result.json, the others write beside it.
        out = out / f"node{args.node_rank}"
    framework_fanouts = registry.framework(args.framework).framework_fanouts(fanouts)
    uneven = bool(args.uneven_batches or args.inject == "uneven-batches")

    return RunConfig(
        framework=args.framework, model=args.model, devices=args.devices,
        batch_size=args.batch_size, workers=args.workers, dataset=args.dataset,
        epochs=args.epochs, out=str(out), fanouts=fanouts,
        fanouts_framework=framework_fanouts, repeat=args.repeat, seed=args.seed,
        data_root=str(Path(args.data_root).resolve()), device_type=device,
        backend="nccl" if device == "cuda" else "gloo", nodes=args.nnodes,
        node_rank=args.node_rank, master_addr=args.master_addr, master_port=args.master_port,
        layers=layers, hidden=hidden, heads=heads, dropout=dropout, lr=args.lr,
        weight_decay=args.weight_decay, lr_scaling=args.lr_scaling,
        warmup_epochs=args.warmup_epochs, self_loops=not args.no_self_loops,
        replace=args.replace, pyg_trim=args.pyg_trim, breakdown=breakdown,
        probes=not args.no_probes, cpu_sample_interval_s=args.cpu_sample_interval,
        nvml_sample_interval_s=args.nvml_sample_interval, eval_every=eval_every,
        eval_batch_size=args.eval_batch_size, uneven_batches=uneven, inject=args.inject,
        inject_rank=args.inject_rank, threads_per_rank=threads, time_limit_s=args.time_limit,
        stall_floor_s=args.stall_floor, stall_factor=args.stall_factor,
        startup_timeout_s=args.startup_timeout, native_stacks=args.native_stacks,
        max_steps_per_epoch=args.max_steps_per_epoch, skip_reason=skip_reason,
        memory_limit_bytes=memory_limit, harness=args.harness, until=args.until, precision=args.precision,
        min_steady_epochs=args.min_steady_epochs, max_train_s=args.max_train_time,
    )

