"""The sweep's grammar: what a (schema-validated) sweep config asks for, as plain data.

The checks the config schema cannot express, the runs of each config block, their names (one
formatter, `Run.name`, and one parser, `parse`), their execution order and the command that
reruns one point. workflows/rules/common.smk calls into this at parse time; analysis.repeats.second_round
reads run names with the same parser. Light on purpose (no torch, no Snakemake): `snakemake -n`
imports it.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from runners import datasets  # numpy only: the dataset names
from runners import settings
from runners.adapters import registry
from runners.records.envinfo import lane_interpreter, visible_gpu_count


class ConfigError(ValueError):
    """A sweep config the schema accepts but the sweep cannot run, naming the key."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"Invalid config: {key}: {problem}")
        self.key = key


def harness_prefix(harness: str) -> str:
    """Run-name prefix of a harness: none for the default (fair) harness, "study-" for the study's."""
    return "" if harness == settings.default("harness") else f"{harness}-"


# What a run is for (see settings.sweep_values), by the prefix its name starts with: timing
# runs (the grid's; the fair harness, stopping as config timing says; no prefix, so their
# names stay as they were), convergence runs (config convergence; fixed schedule, validated
# every epoch), runs of the seed study's harness (fixed schedule) and the deadlock
# demonstrations.
KIND_PREFIXES = {
    "timing": "",
    "convergence": "conv-",
    "study": harness_prefix("study"),
    "deadlock": "hang-",
}
# The lane a run runs in (settings.LANES, scripts/setup.sh): none for the pair, the lane's
# name for a lane beside it (timing runs only). `unmanaged` is no lane a sweep can ask for.
LANE_PREFIXES = {lane: "" if lane == "pair" else f"{lane}-" for lane in settings.LANES if lane != "unmanaged"}
# The loader a timing run uses (registry Framework.loaders): none for the framework's first
# ("default", as runs.csv's loader_variant says), the loader's name for another one.
LOADER_PREFIXES = {"default": ""} | {name: f"{name}-" for name in registry.OTHER_LOADERS}
# Whether a timing run trims its layers (registry Framework.layer_trim; config `trim`): none for the
# framework's own default, "trim-" for a run with the trimming on.
TRIM_PREFIXES = {False: "", True: f"{registry.LAYER_TRIM}-"}
# How a timing run holds the graph (settings.STRATEGIES): none for replicated, "part-METHOD-"
# for the partitioned strategy with its partitioning method (settings.PART_METHODS).
PART_PREFIXES = {"replicated": ""} | {method: f"part-{method}-" for method in settings.PART_METHODS}

# The prefix wildcards of a run name, in the order the name spells them, and each one's table.
PREFIXES = {"kind_prefix": KIND_PREFIXES, "lane_prefix": LANE_PREFIXES, "loader_prefix": LOADER_PREFIXES,
            "trim_prefix": TRIM_PREFIXES, "part_prefix": PART_PREFIXES}
# A run's name, written once: the run rule's output and log, and every run directory, use it.
RUN_NAME = ("{kind_prefix}{lane_prefix}{loader_prefix}{trim_prefix}{part_prefix}"
            "{framework}-{model}-d{devices}-b{batch}-w{workers}-r{repeat}")
RUN_DIR = "results/runs/{dataset}/" + RUN_NAME
# What the runs of one point share (the adaptive plan names points so), and what then tells them apart.
STEM, REPEAT_SUFFIX = RUN_NAME.removesuffix("-r{repeat}"), "-r{repeat}"
assert STEM + REPEAT_SUFFIX == RUN_NAME


def prefix_pattern(prefixes) -> str:
    """A wildcard's regular expression: one of `prefixes`, or none (the empty prefix)."""
    return f"({registry.wildcard_pattern([p for p in prefixes if p])})?"


# The workflow's wildcard constraints: they make run names parse back unambiguously, and
# `parse` matches names with the same expressions, so the two cannot disagree.
WILDCARD_PATTERNS = {
    "dataset": r"[A-Za-z0-9_.-]+",
    "framework": registry.wildcard_pattern(registry.FRAMEWORK_NAMES),
    "model": registry.wildcard_pattern(registry.MODEL_NAMES),
    "devices": r"\d+",
    "batch": r"\d+",
    "workers": r"\d+",
    "repeat": r"\d+",
} | {key: prefix_pattern(table.values()) for key, table in PREFIXES.items()}

# RUN_NAME split into its literal text and its wildcards (odd places), each wildcard a named group
_NAME_RE = re.compile("".join(f"(?P<{part}>{WILDCARD_PATTERNS[part]})" if i % 2 else re.escape(part)
                              for i, part in enumerate(re.split(r"\{(\w+)\}", RUN_NAME))))
_INVERSE = {key: {p: name for name, p in table.items()} for key, table in PREFIXES.items()}


@dataclass(frozen=True)
class Run:
    """One run of a sweep: a grid point, what it is for, where it runs, and its repeat."""

    framework: str
    model: str
    devices: int
    batch: int
    workers: int
    repeat: int
    kind: str = "timing"  # KIND_PREFIXES
    lane: str = "pair"  # LANE_PREFIXES
    loader: str = "default"  # LOADER_PREFIXES
    trim: bool = False  # TRIM_PREFIXES
    part_method: str = "replicated"  # PART_PREFIXES
    dataset: str = ""

    @property
    def wildcards(self) -> dict:
        """The run rule's wildcards (RUN_DIR's fields)."""
        return dict(dataset=self.dataset, kind_prefix=KIND_PREFIXES[self.kind], lane_prefix=LANE_PREFIXES[self.lane],
                    loader_prefix=LOADER_PREFIXES[self.loader], trim_prefix=TRIM_PREFIXES[self.trim],
                    part_prefix=PART_PREFIXES[self.part_method],
                    framework=self.framework, model=self.model, devices=self.devices, batch=self.batch,
                    workers=self.workers, repeat=self.repeat)

    @property
    def name(self) -> str:
        """The run's name, e.g. conv-pyg-sage-d2-b256-w0-r1 (the one formatter)."""
        return RUN_NAME.format(**self.wildcards)

    @property
    def stem(self) -> str:
        """The name without its repeat: what the runs of one point share."""
        return STEM.format(**self.wildcards)

    @property
    def dir(self) -> str:
        """results/runs/DATASET/NAME."""
        return RUN_DIR.format(**self.wildcards)

    @property
    def result(self) -> str:
        return os.path.join(self.dir, "result.json")

    @property
    def harness(self) -> str:
        """The study's harness for study runs, else the default (fair) one."""
        return "study" if self.kind == "study" else settings.default("harness")


def from_wildcards(wildcards) -> Run:
    """The run of the run rule's wildcards (a Snakemake Wildcards, or a dict as Run.wildcards)."""
    get = wildcards.get if isinstance(wildcards, dict) else lambda key: getattr(wildcards, key)
    names = {}
    for key, inverse in _INVERSE.items():
        if get(key) not in inverse:
            raise ValueError(f"{key} {get(key)!r} is none of {', '.join(map(repr, inverse))}")
        names[key] = inverse[get(key)]
    return Run(framework=get("framework"), model=get("model"), devices=int(get("devices")), batch=int(get("batch")),
               workers=int(get("workers")), repeat=int(get("repeat")), kind=names["kind_prefix"],
               lane=names["lane_prefix"], loader=names["loader_prefix"], trim=names["trim_prefix"],
               part_method=names["part_prefix"],
               dataset=get("dataset"))


def parse(name: str, dataset: str = "", repeat: int | None = None) -> Run:
    """The run a run name names (the one parser, Run.name's inverse); with `repeat`, `name` is
    a stem (Run.stem) and the run is that repeat of it."""
    full = name if repeat is None else name + REPEAT_SUFFIX.format(repeat=repeat)
    m = _NAME_RE.fullmatch(full)
    if not m:
        raise ValueError(f"{full!r} is no run name: {RUN_NAME}, prefixes from "
                         + "; ".join(f"{k} {sorted(filter(None, t.values()))}" for k, t in PREFIXES.items()))
    return from_wildcards(m.groupdict() | {"dataset": dataset})


def parse_dir(path) -> Run:
    """The run of a run directory results/runs/DATASET/NAME."""
    path = os.path.normpath(str(path))
    return parse(os.path.basename(path), os.path.basename(os.path.dirname(path)))


# --- the config -----------------------------------------------------------------------------


def check(config: dict, basedir: str = ".", data_root: str = "results/datasets") -> None:
    """Raise ConfigError for what the schema cannot express (it has checked each value alone).

    `basedir` holds the lanes' environments, `data_root` the user's imported graphs.
    """
    grid = config["grid"]
    # The registry is the one list of frameworks (the schema names none, so adding one is one entry)
    unknown = [f for f in grid["frameworks"] if f not in registry.FRAMEWORK_NAMES]
    if unknown:
        raise ConfigError("grid.frameworks", f"{unknown[0]!r} is no registered framework; registered: "
                          f"{', '.join(registry.FRAMEWORK_NAMES)} (runners/adapters/registry.py)")
    for model, given in config["models"].items():
        # epochs: any model may train for its own number of epochs
        unused = sorted(set(given) - set(registry.model(model).settings) - {"epochs"})
        if unused:
            raise ConfigError(f"models.{model}", f"{', '.join(unused)} not used by {model}; it takes "
                              f"{', '.join(registry.model(model).settings)}")
    for model in grid["models"]:
        layers = settings.model_settings(config, model)["layers"]
        if len(config["fanouts"]) != layers:
            raise ConfigError("fanouts", f"{config['fanouts']} has {len(config['fanouts'])} entries but "
                              f"models.{model}.layers is {layers}; give one fan-out per layer, hop nearest the "
                              "seeds first")
    unknown = sorted(set(grid["worker_batch_sizes"] or []) - set(grid["batch_sizes"]))
    if unknown:
        raise ConfigError("grid.worker_batch_sizes", f"{unknown} not in grid.batch_sizes "
                          f"{sorted(grid['batch_sizes'])}; workers run at some of the grid's batch sizes, or null "
                          "for all")
    # A name other than the suite's own must be a graph the user imported (runners.datasets
    # import) or a twin made with runners.datasets twin.
    try:
        datasets.check_name(config["dataset"], data_root)
    except datasets.DatasetError as exc:
        raise ConfigError("dataset", str(exc)) from None
    for lane in (config.get("lanes") or {}).get("compare", []):
        python = interpreter(lane, basedir)
        if not os.path.exists(python):
            raise ConfigError("lanes.compare", f"{lane!r}: its environment {python} is missing: run "
                              f"`make setup LANE={lane}` (`make lanes` builds pair and current), or drop the "
                              "lane from lanes.compare")
    for loader in (config.get("loaders") or {}).get("compare", []):
        if not loader_frameworks(config, loader):
            allowed = [f"{n} ({f})" for f in grid["frameworks"] for n in registry.framework(f).loaders[1:]]
            raise ConfigError("loaders.compare", f"{loader!r} is no other loader of a framework in grid.frameworks "
                              f"({', '.join(grid['frameworks'])}); allowed: "
                              + (", ".join(allowed) or "none, as none of them has a second loader"))
    check_trim(config)
    if config.get("strategy") and config["nodes"] < 2:
        raise ConfigError("strategy", "partitioned runs need nodes >= 2 (one partition per host, each host an "
                          "address of its own: DGL finds a process's machine by the first local address in its "
                          f"ip_config); nodes is {config['nodes']}")


def check_trim(config: dict) -> None:
    """Config `trim` needs a framework in the grid that can trim its layers, whose runs do not
    trim already (then there is nothing untrimmed to time the trimmed runs beside)."""
    if not config.get("trim"):
        return
    if not trim_frameworks(config):
        raise ConfigError("trim", f"none of grid.frameworks ({', '.join(config['grid']['frameworks'])}) can trim "
                          f"its layers; those that can: {', '.join(registry.TRIM_SETTINGS) or 'none'}; add one, or set "
                          "trim: null")
    for f in trim_frameworks(config):
        key = settings.BY_NAME[registry.TRIM_SETTINGS[f]].config_key
        if settings.config_value(config, key):
            raise ConfigError("trim", f"{key} is true, so every {f} run trims already; set it false to time "
                              "trimmed runs beside untrimmed ones, or trim: null")


def trim_frameworks(config: dict) -> list:
    """The grid's frameworks that can trim their layers (registry Framework.layer_trim)."""
    return [f for f in config["grid"]["frameworks"] if f in registry.TRIM_SETTINGS]


def interpreter(lane: str, basedir: str) -> str:
    """The Python of a lane beside the pair, under `basedir` (runners.records.envinfo says where)."""
    return os.path.join(basedir, lane_interpreter(lane))


def loader_frameworks(config: dict, loader: str) -> list:
    """The grid's frameworks that have `loader` as another loader than their first."""
    return [f for f in config["grid"]["frameworks"] if loader in registry.framework(f).loaders[1:]]


def resolve_devices(config: dict, visible_gpus=visible_gpu_count) -> list:
    """The grid's device counts; "all" is 1..N processes per node (see the schema)."""
    devices = config["grid"]["devices"]
    if devices != "all":
        return sorted(devices)
    n = config["node_gpus"] or visible_gpus() or config["max_cpu_devices"]
    return list(range(1, n + 1))


# --- the runs -------------------------------------------------------------------------------


def points(config: dict, kinds, devices, batches, workers, repeats: int, models=None, lane="pair",
           loader="default", part_method="replicated", trim=False) -> list:
    """Runs of the grid's frameworks x models (or `models`) over the given axes, for each of
    `kinds` in `lane` with `loader`, replicated or partitioned by `part_method`, trimmed or not."""
    grid = config["grid"]
    return [Run(framework=f, model=m, devices=d, batch=b, workers=w, repeat=r, kind=kind, lane=lane,
                loader=loader, part_method=part_method, trim=trim, dataset=config["dataset"])
            for kind, f, m, d, b, w, r in itertools.product(
                kinds, grid["frameworks"], models or grid["models"], devices, sorted(batches), sorted(workers),
                range(repeats))]


def blocks(config: dict, devices: list) -> dict:
    """The first round's runs by the config block that asks for them, in a stable order: the
    grid, then convergence, study, deadlocks, lanes, loaders, trim and strategy when present."""
    grid = config["grid"]
    out = {"grid": [
        run for run in points(config, ["timing" if h == settings.default("harness") else h for h in grid["harnesses"]],
                              devices, grid["batch_sizes"], grid["workers"], grid["repeats"])
        if run.workers == 0 or grid["worker_batch_sizes"] is None or run.batch in grid["worker_batch_sizes"]]}
    if config.get("convergence"):
        c = config["convergence"]
        out["convergence"] = points(config, ["convergence"], [c["devices"]], [c["batch_size"]], [c["workers"]],
                                    c["repeats"])
    if config.get("study"):
        s = config["study"]
        out["study"] = points(config, ["study"], sorted(s["devices"]), [s["batch_size"]], [s["workers"]],
                              s["repeats"])
    if config.get("deadlocks"):
        h = config["deadlocks"]
        out["deadlocks"] = points(config, ["deadlock"], [h["devices"]], [h["batch_size"]], [h["workers"]], 1,
                                  h["models"])
    if config.get("lanes"):
        lanes = config["lanes"]
        out["lanes"] = [run for lane in lanes["compare"]
                        for run in points(config, ["timing"], sorted(lanes["devices"]), [lanes["batch_size"]],
                                          [lanes["workers"]], lanes["repeats"], lane=lane)]
    if config.get("loaders"):
        o = config["loaders"]
        out["loaders"] = [run for loader in o["compare"]
                          for run in points(config, ["timing"], sorted(o["devices"]), [o["batch_size"]],
                                            [o["workers"]], o["repeats"], o.get("models"), loader=loader)
                          if run.framework in loader_frameworks(config, loader)]
    if config.get("trim"):
        t = config["trim"]
        out["trim"] = [run for run in points(config, ["timing"], sorted(t["devices"]), [t["batch_size"]],
                                             [t["workers"]], t["repeats"], t.get("models"), trim=True)
                       if run.framework in trim_frameworks(config)]
    if config.get("strategy"):
        p = config["strategy"]
        out["strategy"] = [run for run in points(config, ["timing"], sorted(p["devices"]), [p["batch_size"]], [0],
                                                 p["repeats"], p.get("models"), part_method=p["method"])
                           if registry.framework(run.framework).partitioned_adapter]
    return out


def first_round(config: dict, devices: list) -> list:
    """Every run the config asks for before any second round, in blocks' order."""
    return [run for runs in blocks(config, devices).values() for run in runs]


def planned_by_adaptive(run: Run) -> bool:
    """Whether the adaptive plan reads the run: the pair's replicated timing runs (the grid's,
    a framework's other loaders' and its trimmed runs'; a plan's point key has no lane or strategy)."""
    return run.kind == "timing" and run.lane == "pair" and run.part_method == "replicated"


def run_flags(config: dict, run: Run) -> str:
    """Runner flags that come from the config for `run` (the run rule's `settings` param)."""
    flags = settings.sweep_flags(config, run.model, run.kind, run.repeat, run.harness)
    # The pair's runs pass no --lane (the runner records the lane of the Python either way),
    # so that adding lanes reruns none of them.
    if run.lane != "pair":
        flags = f"{flags} --lane {run.lane}"
    # Nor do runs of a framework's first loader pass --loader: adding loaders reruns nothing.
    if run.loader != "default":
        flags = f"{flags} --loader {run.loader}"
    # A trimmed run names its framework's trimming switch (--pyg-trim); the others pass none.
    if run.trim:
        flags = f"{flags} {settings.BY_NAME[registry.TRIM_SETTINGS[run.framework]].option}"
    if run.part_method != "replicated":
        # "slurm": each node's launcher writes the list from the job's own nodes (runners.launch.slurm);
        # nobody can name them before the scheduler picks them.
        flags += (f" --strategy partitioned --part-method {run.part_method}"
                  f" --ip-config {config['strategy'].get('ip_config') or 'slurm'}")
    return flags


# --- the order ------------------------------------------------------------------------------


def interleaved_order(results, repeats, seed, configurations=None, blocks=None) -> list:
    """Execution order of the runs: all of repeat 0, then repeat 1, ...: drift over the sweep
    and bursts of outside load hit every configuration alike instead of one block of runs.
    Within a repeat the runs of one block (`blocks[i]`, the model of `results[i]`: the analysis
    fits a shift per repeat x model, analysis.repeats.noise) run together, the blocks in a shuffled
    order; within a block the configurations are shuffled, and the runs of one configuration
    that differ only in their framework (`configurations[i]` names the configuration of
    `results[i]` without it) run back to back in a shuffled order, so a drift of the machine
    hits both sides of a framework comparison alike and the sides of every other comparison
    within minutes of each other. The shuffles are drawn from random.Random(seed): the order is
    reproducible and recorded in the config. `repeats[i]` is the repeat index of `results[i]`.
    """
    rng = random.Random(seed)
    configurations = configurations or results
    blocks = blocks or [None] * len(results)
    order = []
    for r in sorted(set(repeats)):
        grouped = {}
        for path, rep, conf, blk in zip(results, repeats, configurations, blocks):
            if rep == r:
                grouped.setdefault(blk, {}).setdefault(conf, []).append(path)
        keys = list(grouped)
        rng.shuffle(keys)
        for blk in keys:
            confs = list(grouped[blk])
            rng.shuffle(confs)
            for conf in confs:
                rng.shuffle(grouped[blk][conf])
                order += grouped[blk][conf]
    return order


class Schedule:
    """The runs' execution order (interleaved_order); formats a result path as "i/N", its place.

    The run jobs' message formats "{RUN_NUMBER:{output.result}}": messages see the workflow's
    globals, and the position must not be a param, or growing the grid would invalidate every
    finished run.
    """

    def __init__(self, runs: list, seed: int):
        # a configuration is everything but the framework: both frameworks' runs of it go together;
        # a block is one model's runs of a repeat
        self.order = interleaved_order(
            [run.result for run in runs], [run.repeat for run in runs], seed,
            [repr(sorted((k, str(v)) for k, v in run.wildcards.items() if k != "framework")) for run in runs],
            [run.model for run in runs])
        self.index = {path: i for i, path in enumerate(self.order)}

    def __format__(self, path: str) -> str:
        i = self.index.get(path)
        return f"{'?' if i is None else i + 1}/{len(self.index)}"

    def priority(self, run: Run) -> int:
        """Scheduling priority: earlier in the order = higher, 0 for a run outside it.

        Snakemake (>= 9) picks the highest-priority ready job first; with bench=1 only one run
        may run at a time, so runs start in this order. Not a param: reordering never
        invalidates a finished run.
        """
        return len(self.order) - self.index.get(run.result, len(self.order))


# --- rerunning one point --------------------------------------------------------------------


# Snakemake by the pair lane's path (the Makefile's VENV), as the README's commands call it, where
# none is beside the interpreter running the workflow (snakemake_command).
SNAKEMAKE = ".venv/bin/snakemake"


def snakemake_command(basedir: str) -> str:
    """The snakemake a rerun command names: the one beside the interpreter running the workflow,
    relative to the project directory `basedir` when it lives there (.venv/bin/snakemake), else
    its absolute path, as the direct command names its python (runners.records.settle.
    rerun_interpreter); SNAKEMAKE when there is none. Never a bare `snakemake`: a fresh shell
    has none on its PATH."""
    # not resolved: a venv's python is a link out of it
    exe = Path(os.path.abspath(sys.executable)).parent / "snakemake"
    if not exe.exists():
        return SNAKEMAKE
    root = os.path.abspath(basedir)
    return os.path.relpath(exe, root) if str(exe).startswith(root + os.sep) else str(exe)


def rerun_command(configfiles, overrides: dict | None, basedir: str, on_slurm: bool) -> str:
    """The snakemake command that reruns one point of this sweep, as the report prints it (the
    aggregate appends `--forcerun` and the point's result): the invocation's profile, config
    files (relative to `basedir`, the project directory) and --config values."""
    snakemake = snakemake_command(basedir)
    words = ([snakemake, "--workflow-profile", "profiles/slurm"] if on_slurm
             else [snakemake, "--cores", "all", "--profile", "profiles/default"])
    for path in configfiles or []:
        rel = os.path.relpath(os.path.abspath(path), basedir)
        words += ["--configfile", path if rel.startswith("..") else rel]
    # --config values too (`make report LANES=current` adds its lane so), or a lane's point
    # would not be in the rerun's workflow at all
    if overrides:
        words += ["--config", *(f"{key}={yaml_flow(value)}" for key, value in overrides.items())]
    return " ".join(shlex.quote(str(w)) for w in words)


def yaml_flow(value) -> str:
    """A --config value as one line of YAML ({compare: [current]}), which snakemake parses back."""
    import yaml  # only when there are --config values

    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")
