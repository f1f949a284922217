"""Every setting of a run, declared once, as a field of RunSettings: its type and default in
the source, its option, check, choices, group and config key in the field's metadata
(`setting(...)`).

From those fields derive (SETTINGS): the runner's command line (`add_options`), the
single-value checks with their messages (`option_values`), the flags the Snakemake rules pass
for a sweep config (`sweep_flags`), and the runs.csv config columns (analysis.aggregate). The
sweep config's schema (workflows/schemas/config.schema.yaml) is data, not derived:
tests/test_settings.py fails when it and the fields disagree. runners.config.RunConfig is
RunSettings with the values the launcher resolves from the machine.

Adding a setting: one field below (plus its `config_key` and a schema entry when the sweep
config sets it); the code that uses its value reads `cfg.<name>`.

Light: no torch, PyG or DGL (the launcher's option checks and Snakemake at parse time read it).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from runners.adapters import registry



class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # the default of a setting that every run must give
LANES = ("pair", "current", "own", "unmanaged")  # scripts/setup.sh; unmanaged: a Python it did not build
HARNESSES = ("fair", "study")  # fair: the suite's DDP loop; study: the seed study's Lightning harness
RANK_STARTERS = ("auto", "spawn", "torchrun")
FAULTS = ("uneven-batches", "stall-rank", "freeze-rank", "hang-worker", "crash-rank", "kill-worker", "hang-pipeline")
LR_SCALINGS = ("none", "linear")
DEVICE_CHOICES = ("auto", "cpu", "cuda")
BREAKDOWN_CHOICES = ("auto", "on", "off")
# replicated: every rank holds the whole graph (DDP); partitioned: one partition per host, served
# by DistDGL's graph servers (runners/partitioned/server.py)
STRATEGIES = ("replicated", "partitioned")
PART_METHODS = ("metis", "random")  # runners.partitioned.split.METHODS


class ConfigError(ValueError):
    """A bad option value; the message names the option, the value and what is allowed."""


class Check(NamedTuple):
    """A rule one value must meet, and how the error message states it."""

    ok: Callable[[Any], bool]
    rule: str  # "must be at least 1"


def at_least(n, why: str = "") -> Check:
    rule = "must be 0 or more" if n == 0 else f"must be at least {n}"
    return Check(lambda v: v >= n, rule + (f" ({why})" if why else ""))


POSITIVE = Check(lambda v: v > 0, "must be positive")


@dataclass(frozen=True)
class Setting:
    """One run setting, as the command line, the checks and the sweep see it. `name` is its
    RunSettings field and result.json `config` key; built from the field (`setting(...)`)."""

    name: str
    type: type  # of the RunConfig field (list: a comma-separated option)
    default: Any = REQUIRED  # the field's default; None: resolved later (a model setting: the model's)
    help: Optional[str] = None
    check: Optional[Check] = None
    choices: Any = ()  # allowed values, or a callable returning them (names from elsewhere)
    flag: Optional[str] = ""  # "": "--" + name with dashes; None: no option (set by the harness only)
    option_default: Any = REQUIRED  # REQUIRED: the field's default
    parse: Optional[Callable] = None  # option text -> field value, raising ConfigError
    after: Optional[str] = None  # an option with no field of its own: the field it follows
    group: str = "training settings"
    config_key: Optional[str] = None  # dotted key of the sweep config (workflows/schemas)
    config_default: Any = REQUIRED  # the sweep config's default where it differs on purpose
    # The sweep passes it only when it differs from the runner's default, so that adding the
    # setting to the sweep reruns no finished run (switches never carry their default anyway).
    sweep_omits_default: bool = False
    metavar: Optional[str] = None

    @property
    def field(self) -> bool:
        """Whether the setting is a field of RunSettings (else an option only)."""
        return self.after is None

    @property
    def option(self) -> Optional[str]:
        return None if self.flag is None else self.flag or "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The argparse attribute the option is parsed into."""
        return self.option.lstrip("-").replace("-", "_")

    @property
    def switch(self) -> bool:
        """A flag without a value that turns the default over (--replace, --no-self-loops)."""
        return self.type is bool and not self.choices

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def cli_default(self):
        return self.default if self.option_default is REQUIRED else self.option_default

    def allowed(self) -> tuple:
        return tuple(self.choices() if callable(self.choices) else self.choices)


def setting(default: Any = REQUIRED, *, column: bool = True, experiment: bool = False, **declared) -> Any:
    """A RunSettings field: its default (none: every run must give it) and, in its metadata,
    the rest of its Setting (option, check, choices, group, config key, ...) and what the
    analysis makes of it: `column`, a runs.csv column; `experiment`, runs that differ in it are
    never mixed in one table cell (analysis.EXPERIMENT_KEYS)."""
    roles = {"column": column, "experiment": experiment}
    if default is REQUIRED:
        return dataclasses.field(metadata={"setting": declared, **roles})
    if isinstance(default, list):
        return dataclasses.field(default_factory=default.copy,
                                 metadata={"setting": {"default": default, **declared}, **roles})
    return dataclasses.field(default=default, metadata={"setting": declared, **roles})


def _field_type(hint) -> type:
    """A field's annotation as the option's type: Optional[int] -> int."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


def declared(cls, option_only: tuple) -> tuple:
    """Every setting of `cls`'s fields (those made by `setting(...)`), in field order, with each
    option-only setting placed after the field it names."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        if "setting" not in f.metadata:
            continue
        meta = dict(f.metadata["setting"])
        default = meta.pop("default", REQUIRED if f.default is dataclasses.MISSING else f.default)
        found.append(Setting(f.name, _field_type(hints[f.name]), default, **meta))
        found += [s for s in option_only if s.after == f.name]
    lost = [f"{s.name} (after {s.after!r})" for s in option_only if s not in found]
    if lost:
        raise ValueError(f"options placed after no field of {cls.__name__}: {', '.join(lost)}")
    return tuple(found)


def _until_choices():
    from runners.rank.stopping import UNTIL  # light: scipy only when the rule runs

    return UNTIL


def parse_fanouts(text) -> list:
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


def parse_eval_every(text):
    """'end', or a whole number >= 0."""
    if text == "end":
        return text
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise ConfigError(f"--eval-every {text!r}: allowed: a whole number >= 0, or 'end'")
    return value


def parse_memory_limit(text) -> int:
    from runners.memory.units import MemoryLimitError, parse_size

    try:
        return parse_size(text)
    except MemoryLimitError as exc:
        raise ConfigError(str(exc))


_CONF, _STOP, _PROBES, _WATCHDOG = ("the configuration", "when to stop (runners/rank/stopping.py)", "probes",
                                    "watchdog")
_MULTI_NODE = "multi-node (torchrun static rendezvous)"

@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """Every setting of one run, each field with its option, check, group and config key
    (`setting(...)`); runners.config.RunConfig adds the values the launcher resolves. In the
    order the sweep passes them: the flags are the run rule's params, a rerun trigger, so
    reordering them would rerun every finished run of a sweep."""

    framework: str = setting(choices=registry.FRAMEWORK_NAMES, group=_CONF)
    model: str = setting(choices=registry.MODEL_NAMES, group=_CONF)
    devices: int = setting(check=at_least(1), group=_CONF,
        help="processes per node: GPUs when present, CPU processes otherwise")
    batch_size: int = setting(check=Check(lambda v: v >= 1, "must be a positive integer"), group=_CONF,
        help="seed nodes per process and step")
    workers: int = setting(check=at_least(0), group=_CONF, help="data-loader worker processes per rank")
    # No fixed choices: a dataset imported under --data-root is named too (config.check_dataset).
    dataset: str = setting(experiment=True, group=_CONF,
                           help="dataset name: one of runners.datasets list, or a graph imported with "
                                "python -m runners.datasets import PATH --name NAME (or a twin: twin SOURCE "
                                "--name NAME)")
    out: str = setting(column=False, group=_CONF, help="run directory to write")
    # -- when to stop; the sweep sets these per kind of run (sweep_stop_values)
    until: str = setting("epochs", experiment=True, choices=_until_choices, group=_STOP, sweep_omits_default=True,
        help="epochs: train exactly --epochs; precise: train until the 95%% interval of the steady-state "
        "epoch time is within --precision of its mean (at least --min-steady-epochs after the warm-up "
        "epoch, no drift), --epochs and --max-train-time being caps")
    epochs: int = setting(experiment=True, check=at_least(1), group=_CONF,
        help="epochs to train; with --until precise, the most epochs to train")
    precision: float = setting(0.03, experiment=True, group=_STOP,
        check=Check(lambda v: 0 < v < 1, "must be between 0 and 1 (0.03 = 3%)"),
        help="target relative half-width of the 95%% interval (0.03 = 3%%)")
    min_steady_epochs: int = setting(4, group=_STOP,
        check=at_least(2, "an interval needs two epochs"))
    max_train_s: float = setting(0.0, flag="--max-train-time", group=_STOP,
        check=Check(lambda v: v >= 0, "must be 0 (no cap) or more"),
        help="seconds of training after which a precise run stops anyway (0: no cap)")
    # N: every N epochs and after the last; "end": after the last only; 0: never
    eval_every: int = setting(1, parse=parse_eval_every,
        help="validate every N epochs and after the last; 'end': after the last epoch only; 0: never")
    # -- the sweep's config settings
    fanouts: list = setting([10, 10, 10], experiment=True, parse=parse_fanouts, config_key="fanouts",
        help="neighbours per hop, hop nearest the seeds FIRST (PyG order); translated for DGL. "
        "Length = number of layers")
    seed: int = setting(0, config_key="seed")  # the sweep adds the repeat index
    # Model settings: None takes the model's default (runners/adapters/registry.py); the sweep
    # passes those the model takes (registry Model.settings), its config's models.<name> overrides.
    hidden: Optional[int] = setting(None, experiment=True, check=POSITIVE)
    layers: Optional[int] = setting(None, experiment=True, check=at_least(1))
    dropout: Optional[float] = setting(None, experiment=True,
                                       check=Check(lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"))
    heads: Optional[int] = setting(None, experiment=True, check=POSITIVE)
    lr: float = setting(5e-3, experiment=True, config_key="optimizer.lr")
    weight_decay: float = setting(5e-4, experiment=True, config_key="optimizer.weight_decay")
    lr_scaling: str = setting("none", experiment=True, choices=LR_SCALINGS, config_key="optimizer.lr_scaling",
        help="none, or linear: lr x processes with linear warm-up over --warmup-epochs")
    warmup_epochs: int = setting(0, experiment=True, check=at_least(0), config_key="optimizer.warmup_epochs")
    max_steps_per_epoch: int = setting(0, experiment=True, check=at_least(0), config_key="max_steps_per_epoch",
        help="cap steps per epoch (0: the whole training split); for quick checks")
    time_limit_s: float = setting(3600.0, flag="--time-limit", check=POSITIVE, group=_WATCHDOG,
        config_key="time_limit_s", help="overall limit in seconds")
    stall_floor_s: float = setting(60.0, flag="--stall-floor", check=POSITIVE, group=_WATCHDOG,
        config_key="stall_floor_s", help="never declare a hang before this many seconds without progress")
    stall_factor: float = setting(20.0, check=at_least(1), group=_WATCHDOG, config_key="stall_factor",
        help="hang = no progress for factor x the slowest step seen (at least the floor)")
    skip_unavailable: bool = setting(False, column=False,
        help="record a 'skipped' result instead of failing when this node has fewer GPUs than --devices "
        "(what a sweep wants; on the command line the error is clearer)")
    wait: bool = setting(False, column=False,
        help="when another runner is running this point (--out), wait for it to end, then run "
             "(default: refuse at once, naming it)")
    force_launch: bool = setting(False, column=False,
        help="launch a run the pre-flight calls impossible (a modelled peak above the machine's memory or "
             "the --memory-limit cap, or more than "
                 "8 processes per core); recorded in the result")
    self_loops: bool = setting(True, experiment=True, flag="--no-self-loops", config_key="sampling.self_loops",
        help="GAT without self-attention edges (default: both frameworks add them)")
    replace: bool = setting(False, experiment=True, config_key="sampling.replace",
                            help="sample neighbours with replacement")
    pyg_trim: bool = setting(False, experiment=True, config_key="sampling.pyg_trim",
        help="PyG: trim each layer to the nodes it still needs (off as in PyG's DDP example)")
    nodes: int = setting(1, experiment=True, flag="--nnodes", check=at_least(1), group=_MULTI_NODE, config_key="nodes",
        sweep_omits_default=True)
    # A sweep passes it to multi-node runs only, which need one fixed port on every node.
    master_port: int = setting(0, column=False, group=_MULTI_NODE, config_key="master_port", config_default=29500,
        help="0: pick a free port (single node only)")
    threads_per_rank: int = setting(1, option_default=0, check=at_least(0), group=_PROBES,
        config_key="threads_per_rank", sweep_omits_default=True,
        help="intra-op threads per rank (0: cores // local processes)")
    harness: str = setting(HARNESSES[0], experiment=True, choices=HARNESSES, sweep_omits_default=True,
        help="fair: the suite's DDP loop, both frameworks split the seeds equally; study: the seed "
        "study's PyTorch Lightning harness, loaders built as it built them")
    # None: the framework's first loader (registry Framework.loaders), filled in by the launcher.
    loader: Optional[str] = setting(None, choices=registry.LOADER_NAMES, sweep_omits_default=True,
        help="the framework's neighbour-sampling loader: pyg: neighbor; dgl: classic "
        "(dgl.dataloading.DataLoader) or graphbolt (dgl.graphbolt's pipeline, DGL's examples from 2.1); "
        "default: the framework's first")
    # Left out of a replicated run's identity (RunConfig.identity), so existing run ids stay.
    strategy: str = setting(STRATEGIES[0], experiment=True, choices=STRATEGIES, sweep_omits_default=True,
        help="replicated: every rank holds the whole graph (DDP); partitioned: the graph split into one "
        "partition per host (--nnodes), each served by a DistGraphServer, trainers sampling and fetching "
        "features over RPC (DGL only)")
    part_method: str = setting(PART_METHODS[0], choices=PART_METHODS, sweep_omits_default=True,
        help="partitioned: how the graph is split (runners.partitioned.split)")
    lane: Optional[str] = setting(None, experiment=True, choices=LANES, metavar="LANE",
        help="the software stack the run must run in (scripts/setup.sh): pair (torch 2.2.1, PyG and DGL), "
        "current (the newest torch PyG tests), own (a Python's own torch); default: the lane of the "
        "Python that runs it. Either way the result records it, and it is part of the run's identity")
    # -- runner-only settings
    repeat: int = setting(0, help="repeat index (changes nothing but the label)")
    data_root: str = setting("results/datasets", column=False)
    eval_batch_size: int = setting(4096, column=False)
    uneven_batches: bool = setting(False, experiment=True,
        help="naive split: the last rank gets one batch fewer (reproduces the DDP hang)")
    probes: bool = setting(True, experiment=True, flag="--no-probes", group=_PROBES,
        help="switch off the per-phase step timing, CPU and NVML samplers")
    breakdown: bool = setting(True, experiment=True, option_default="auto", choices=BREAKDOWN_CHOICES, group=_PROBES,
        help="split each step into phases; on GPUs this synchronises (auto: on for CPU)")
    cpu_sample_interval_s: float = setting(1.0, column=False, flag="--cpu-sample-interval", group=_PROBES)
    nvml_sample_interval_s: float = setting(0.5, column=False, flag="--nvml-sample-interval", group=_PROBES)
    startup_timeout_s: float = setting(600.0, column=False, flag="--startup-timeout", group=_WATCHDOG,
        help="seconds allowed from launch to the first step")
    kill_grace_s: float = setting(5.0, column=False, flag=None)
    memory_limit_bytes: int = setting(0, column=False, flag="--memory-limit", option_default=None, group=_WATCHDOG,
        parse=parse_memory_limit, metavar="SIZE",  # 0: no cap; else the tree runs in a memory cgroup
        help="run the whole process tree (torchrun, ranks, loader workers) under this memory cap, e.g. "
        "512M or 2G, in a memory cgroup (needs root and a writable memory controller)")
    native_stacks: bool = setting(False, column=False, group=_WATCHDOG,
                                  help="also capture native stacks (py-spy --native)")
    inject: Optional[str] = setting(None, experiment=True, choices=FAULTS, group=_WATCHDOG,
        help=f"fault injection: one of {', '.join(FAULTS)}")
    inject_rank: int = setting(-1, group=_WATCHDOG)
    inject_epoch: int = setting(0, column=False, flag=None)
    inject_step: int = setting(2, column=False, flag=None)
    node_rank: int = setting(0, column=False, group=_MULTI_NODE)
    master_addr: str = setting("127.0.0.1", column=False, group=_MULTI_NODE)
    ip_config: Optional[str] = setting(None, column=False, group=_MULTI_NODE, metavar="FILE|slurm",
        help="partitioned across hosts: DGL's ip_config, one line 'ADDRESS [PORT]' per host in node-rank "
        "order (host k serves partition k); slurm: made from the SLURM job's nodes (their NodeAddr, in "
        "node order; under srun with scripts/slurm_node.sh); one node: 127.0.0.1 and a free port")
    rank_starter: str = setting("auto", column=False, choices=RANK_STARTERS, group=_MULTI_NODE,
        help="what starts the ranks: spawn (runners.launch.spawn, one node only: a file store, and the ranks' "
        "exit seen at once), torchrun (its agent notices an exit at its monitor interval), auto: spawn on "
        "one node, torchrun on several")
    # Another node's watchdog fires at about the same moment as this one's, then dumps stacks
    # and stops its tree; a node that died writes nothing, and node 0 waits the whole time.
    other_result_wait_s: float = setting(30.0, column=False, flag="--other-result-wait", check=at_least(0),
        group=_MULTI_NODE, help="a failed multi-node run: seconds node 0 waits for another node's result "
        "(node{K}/result.json beside its own) to name the culprit on that node (a partitioned run's other "
        "nodes wait a third of it for node 0's)")


# Options with no field of their own, each placed after the field named by `after` (the
# order of --help and of the sweep's flags).
OPTION_ONLY = (
    Setting("device", str, "auto", choices=DEVICE_CHOICES, config_key="device",
            help="auto: GPUs when visible, else CPU processes", after='warmup_epochs'),
    Setting("allow_fault_injection", bool, False, group=_WATCHDOG,
            help="required together with --inject, so no fault is switched on by accident", after='inject'),
)
SETTINGS = declared(RunSettings, OPTION_ONLY)
BY_NAME = {s.name: s for s in SETTINGS}
GROUPS = (_CONF, "training settings", _STOP, _PROBES, _WATCHDOG, _MULTI_NODE)  # --help's order


def default(name: str):
    """What a run gets for setting `name` when its option is not given (the one default there
    is; for the few options whose default says "resolve it from the machine", that word:
    threads_per_rank 0, breakdown "auto", memory_limit None, see `option_default`)."""
    return BY_NAME[name].cli_default


# -- the runner's command line -----------------------------------------------------------------

def add_options(parser) -> None:
    """One option per setting that has one, in GROUPS, with the declared default and help."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for s in SETTINGS:
        if s.option is None:
            continue
        kwargs = {"help": s.help}
        if s.switch:
            kwargs["action"] = "store_true"
        elif s.required:
            kwargs.update(required=True, type=s.type)
        else:
            value = s.cli_default
            kwargs["default"] = ",".join(map(str, value)) if isinstance(value, list) else value
            if s.type in (int, float) and s.parse is None:
                kwargs["type"] = s.type
        if s.help is None and s.choices and not callable(s.choices):
            kwargs["help"] = f"one of {', '.join(s.allowed())}"
        if s.metavar or (s.choices and not callable(s.choices)):
            kwargs["metavar"] = s.metavar or "{" + ",".join(s.allowed()) + "}"
        groups[s.group].add_argument(s.option, **kwargs)


def check_value(s: Setting, value) -> None:
    """Raise ConfigError naming the option, the bad value and what is allowed."""
    allowed = s.allowed() if s.choices else ()
    if allowed and value not in allowed:
        raise ConfigError(f"{s.option} {value!r} is unknown; allowed: {', '.join(map(str, allowed))}")
    if s.check is not None and not s.check.ok(value):
        raise ConfigError(f"{s.option} {value}: {s.check.rule}")


def option_values(args) -> dict:
    """The parsed command line as setting values (switches turned over, option text parsed),
    each checked on its own; an option left out gives the setting's field default."""
    values = {}
    for s in SETTINGS:
        if s.option is None:
            continue
        value = getattr(args, s.dest)
        if s.switch:
            value = (not s.default) if value else s.default
        elif value is not None:
            value = s.parse(value) if s.parse else value
            check_value(s, value)
        values[s.name] = s.default if value is None else value
    return values


def flags(values: dict) -> list:
    """`values` (setting name -> value) as the runner's options, in SETTINGS' order. A switch
    appears only when it turns its default over; a setting that sweep_omits_default only when
    it differs from the runner's default."""
    words = []
    for s in SETTINGS:
        if s.name not in values:
            continue
        value = values[s.name]
        if s.switch:
            words += [s.option] if value != s.default else []
        elif not (s.sweep_omits_default and value == s.cli_default):
            words += [s.option, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return words


# -- the sweep config (workflows/schemas/config.schema.yaml) -----------------------------------

# The config's `timing` section: when a timing run stops. Key -> the setting it gives a timing run
# that trains until precise (a timing run with until epochs trains the fixed schedule instead).
TIMING_KEYS = {"until": "until", "max_epochs": "epochs", "precision": "precision",
               "min_steady_epochs": "min_steady_epochs", "max_train_s": "max_train_s", "eval_every": "eval_every"}


def config_value(config: dict, key: str):
    """The value of dotted `key` ("optimizer.lr") in a (schema-validated) sweep config."""
    for part in key.split("."):
        config = config[part]
    return config


def model_settings(config: dict, name: str) -> dict:
    """The settings of model `name` in a sweep: the registry's defaults, then the config's
    overrides (models.<name>; `epochs` among them gives the model its own schedule)."""
    return {**registry.model(name).defaults, **config["models"].get(name, {})}


def sweep_stop_values(config: dict, kind: str, model: dict) -> dict:
    """When a run stops and when it validates. Timing runs follow config timing (by default
    until their steady-state epoch time is precise, validated once at the end); convergence
    and study-harness runs train the fixed schedule, validated every eval_every epochs."""
    # a model may train for its own number of epochs (GAT needs more steps to learn)
    epochs = model.get("epochs") or config["epochs"]
    if kind == "study" and (config.get("study") or {}).get("epochs"):
        epochs = config["study"]["epochs"]
    timing = config["timing"]
    if kind == "deadlock":  # the hang comes in the first epoch; nothing to validate
        return {"epochs": 1, "eval_every": 0}
    if kind != "timing" or timing["until"] == "epochs":
        every = config["eval_every"] if kind != "timing" else timing["eval_every"]
        return {"epochs": epochs, "eval_every": every}
    return {TIMING_KEYS[key]: value for key, value in timing.items()}


def sweep_values(config: dict, model: str, kind: str, repeat: int, harness: str) -> dict:
    """Every setting a sweep config gives one run of `model` (kind: timing, convergence, study
    or deadlock; see runners/sweep.py), by setting name."""
    settings = model_settings(config, model)
    values = {s.name: config_value(config, s.config_key) for s in SETTINGS if s.config_key}
    values.update(sweep_stop_values(config, kind, settings))
    values.update({name: settings[name] for name in registry.model(model).settings})
    # Each repeat trains from its own seed (weights, sampling, dropout), the same for both
    # frameworks, so accuracy intervals over repeats reflect training randomness.
    values["seed"] += repeat
    # A grid point with more GPUs than the node has is recorded as skipped (with the reason)
    # instead of failing the job, so the sweep still ends in a report.
    values.update(skip_unavailable=True, harness=harness)
    if kind == "deadlock":  # the naive split that hangs, and a watchdog that says so soon
        values.update(uneven_batches=True, stall_floor_s=config["deadlocks"]["stall_floor_s"])
    if values["nodes"] == 1:
        del values["master_port"]  # a single node picks a free port itself
    return values


def sweep_flags(config: dict, model: str, kind: str, repeat: int, harness: str) -> str:
    """The runner options that come from the sweep config for one run (the run rule's
    `settings` param: changing a setting reruns the affected runs, and nothing else does)."""
    return " ".join(flags(sweep_values(config, model, kind, repeat, harness)))
