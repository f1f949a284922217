"""Config validation, the sweep grid and helpers shared by the rule files.

Everything here runs at parse time, so a bad config fails before any job starts.
"""

import itertools
import json
import os
import shlex
from pathlib import Path
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The schema names the offending key and its allowed values; it also fills defaults.
validate(config, "../schemas/config.schema.yaml")


def config_error(key, problem):
    raise WorkflowError(f"Invalid config: {key}: {problem}")


# Frameworks and models, with every model's default settings, come from the registry
# (runners/adapters/registry.py; light, no torch), so the config names only overrides.
if workflow.basedir not in sys.path:
    sys.path.insert(0, workflow.basedir)
from runners import datasets  # noqa: E402 (numpy only: the dataset names)
from runners import settings  # noqa: E402 (every run setting, declared once)
from runners.adapters import registry  # noqa: E402
from runners.envinfo import visible_gpu_count  # noqa: E402 (the one GPU counter)
from analysis import adaptive  # noqa: E402 (sets a stale second-round plan aside)
from analysis import REPORT_PLOTS  # noqa: E402 (the files analysis.report writes)
from analysis import REPORT_TABLES  # noqa: E402


def resolve_devices(devices):
    """Expand devices "all" to 1..N processes per node (see the schema)."""
    if devices != "all":
        return sorted(devices)
    n = config["node_gpus"] or visible_gpu_count() or config["max_cpu_devices"]
    return list(range(1, n + 1))


GRID = config["grid"]
DEVICES = resolve_devices(GRID["devices"])


# Cross-field rules the schema cannot express.
for _model, _given in config["models"].items():
    # epochs: any model may train for its own number of epochs
    _unused = sorted(set(_given) - set(registry.model(_model).settings) - {"epochs"})
    if _unused:
        config_error(
            f"models.{_model}",
            f"{', '.join(_unused)} not used by {_model}; it takes "
            f"{', '.join(registry.model(_model).settings)}",
        )
for _model in GRID["models"]:
    _layers = settings.model_settings(config, _model)["layers"]
    if len(config["fanouts"]) != _layers:
        config_error(
            "fanouts",
            f"{config['fanouts']} has {len(config['fanouts'])} entries but "
            f"models.{_model}.layers is {_layers}; give one fan-out per layer, "
            "hop nearest the seeds first",
        )

_unknown = sorted(set(GRID["worker_batch_sizes"] or []) - set(GRID["batch_sizes"]))
if _unknown:
    config_error(
        "grid.worker_batch_sizes",
        f"{_unknown} not in grid.batch_sizes {sorted(GRID['batch_sizes'])}; "
        "workers run at some of the grid's batch sizes, or null for all",
    )

# Run jobs take every core given to Snakemake, so no other job shares the CPU
# during a timed run. Cluster executors have no such total (cores is None): there
# the allocation size comes from set-threads in profiles/slurm.
MACHINE_THREADS = workflow.resource_settings.cores or 1


def harness_prefix(harness):
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
LANE_PREFIXES = {
    lane: "" if lane == "pair" else f"{lane}-"
    for lane in settings.LANES
    if lane != "unmanaged"
}
# The loader a timing run uses (registry Framework.loaders): none for the framework's first
# ("default", as runs.csv's loader_variant says), the loader's name for another one.
LOADER_PREFIXES = {"default": ""} | {
    name: f"{name}-" for name in registry.OTHER_LOADERS
}
# How a timing run holds the graph (settings.STRATEGIES): none for replicated, "part-METHOD-"
# for the partitioned strategy with its partitioning method (settings.PART_METHODS).
PART_PREFIXES = {"replicated": ""} | {
    method: f"part-{method}-" for method in settings.PART_METHODS
}


def prefix_pattern(prefixes):
    """A wildcard's regular expression: one of `prefixes`, or none (the empty prefix)."""
    return f"({registry.wildcard_pattern([p for p in prefixes if p])})?"


# Wildcards are restricted so that run names parse back unambiguously.
wildcard_constraints:
    dataset=r"[A-Za-z0-9_.-]+",
    framework=registry.wildcard_pattern(registry.FRAMEWORK_NAMES),
    model=registry.wildcard_pattern(registry.MODEL_NAMES),
    devices=r"\d+",
    batch=r"\d+",
    workers=r"\d+",
    repeat=r"\d+",
    kind_prefix=prefix_pattern(KIND_PREFIXES.values()),
    lane_prefix=prefix_pattern(LANE_PREFIXES.values()),
    loader_prefix=prefix_pattern(LOADER_PREFIXES.values()),
    part_prefix=prefix_pattern(PART_PREFIXES.values()),


DATASET = config["dataset"]
# A name other than the suite's own must be a graph the user imported (runners.datasets import)
# or a twin made with runners.datasets twin.
try:
    datasets.check_name(DATASET, "results/datasets")
except datasets.DatasetError as _exc:
    config_error("dataset", str(_exc))
# A run's name, written once: the run rule's output and log and run_dir use it.
RUN_NAME = "{kind_prefix}{lane_prefix}{loader_prefix}{part_prefix}{framework}-{model}-d{devices}-b{batch}-w{workers}-r{repeat}"


def lane_of(wildcards):
    """The lane a run name says it runs in (the pair when it says none)."""
    return {p: lane for lane, p in LANE_PREFIXES.items()}[wildcards.lane_prefix]


def lane_interpreter(lane):
    """.venv-LANE/bin/python of a lane beside the pair (scripts/setup.sh builds it)."""
    return os.path.join(workflow.basedir, f".venv-{lane}", "bin", "python")


def lane_python(wildcards):
    """The interpreter of the run's lane: the one running Snakemake (the pair's .venv) for
    the pair, the lane's own for the others."""
    lane = lane_of(wildcards)
    return "python" if lane == "pair" else lane_interpreter(lane)


def kind_of(wildcards):
    """What a run name says the run is for (KIND_PREFIXES)."""
    return {p: kind for kind, p in KIND_PREFIXES.items()}[wildcards.kind_prefix]


def harness_of(wildcards):
    """The harness a run name names: the study's for study runs, else the default (fair) one."""
    return "study" if kind_of(wildcards) == "study" else settings.default("harness")


RUN_DIR = f"results/runs/{{dataset}}/{RUN_NAME}"


def run_dir(run):
    """The directory of the run `run` (its wildcards' values), e.g.
    results/runs/small/conv-pyg-sage-d2-b256-w0-r1."""
    return RUN_DIR.format(**run)


def points(
    kinds,
    devices,
    batches,
    workers,
    repeats,
    models=None,
    lane="pair",
    loader="default",
    part_method="replicated",
):
    """Run entries of the grid's frameworks x models (or `models`) over the given axes, for
    each of `kinds` (KIND_PREFIXES) in `lane` with `loader`, replicated or partitioned by
    `part_method` (LANE_PREFIXES, LOADER_PREFIXES, PART_PREFIXES).
    """
    return [
        dict(
            dataset=DATASET,
            kind_prefix=KIND_PREFIXES[kind],
            lane_prefix=LANE_PREFIXES[lane],
            loader_prefix=LOADER_PREFIXES[loader],
            part_prefix=PART_PREFIXES[part_method],
            framework=framework,
            model=model,
            devices=d,
            batch=b,
            workers=w,
            repeat=r,
        )
        for kind, framework, model, d, b, w, r in itertools.product(
            kinds,
            GRID["frameworks"],
            models or GRID["models"],
            devices,
            sorted(batches),
            sorted(workers),
            range(repeats),
        )
    ]


# One entry per run, in a stable order (used for "run i/N" messages): the grid, then the
# convergence runs and the study-harness runs when the config asks for them.
RUNS = [
    run
    for run in points(
        [
            "timing" if h == settings.default("harness") else h
            for h in GRID["harnesses"]
        ],
        DEVICES,
        GRID["batch_sizes"],
        GRID["workers"],
        GRID["repeats"],
    )
    if run["workers"] == 0
    or GRID["worker_batch_sizes"] is None
    or run["batch"] in GRID["worker_batch_sizes"]
]
if config.get("convergence"):
    _c = config["convergence"]
    RUNS += points(
        ["convergence"],
        [_c["devices"]],
        [_c["batch_size"]],
        [_c["workers"]],
        _c["repeats"],
    )
if config.get("study"):
    _s = config["study"]
    RUNS += points(
        ["study"],
        sorted(_s["devices"]),
        [_s["batch_size"]],
        [_s["workers"]],
        _s["repeats"],
    )
if config.get("deadlocks"):
    _h = config["deadlocks"]
    RUNS += points(
        ["deadlock"],
        [_h["devices"]],
        [_h["batch_size"]],
        [_h["workers"]],
        1,
        _h["models"],
    )
if config.get("lanes"):
    _l = config["lanes"]
    for _lane in _l["compare"]:
        _py = lane_interpreter(_lane)
        if not os.path.exists(_py):
            raise ValueError(
                f"config lanes.compare lists {_lane!r}, but its environment {_py} is missing: "
                f"run `make setup LANE={_lane}` (`make lanes` builds pair and current), "
                "or drop the lane from lanes.compare"
            )
    for _lane in _l["compare"]:
        RUNS += points(
            ["timing"],
            sorted(_l["devices"]),
            [_l["batch_size"]],
            [_l["workers"]],
            _l["repeats"],
            lane=_lane,
        )
if config.get("loaders"):
    _o = config["loaders"]
    for _loader in _o["compare"]:
        _fws = [
            f
            for f in GRID["frameworks"]
            if _loader in registry.framework(f).loaders[1:]
        ]
        if not _fws:
            config_error(
                "loaders.compare",
                f"{_loader!r} is no other loader of a framework in grid.frameworks "
                f"({', '.join(GRID['frameworks'])}); allowed: "
                + ", ".join(
                    f"{n} ({f})"
                    for f in GRID["frameworks"]
                    for n in registry.framework(f).loaders[1:]
                ),
            )
        RUNS += [
            run
            for run in points(
                ["timing"],
                sorted(_o["devices"]),
                [_o["batch_size"]],
                [_o["workers"]],
                _o["repeats"],
                _o.get("models"),
                loader=_loader,
            )
            if run["framework"] in _fws
        ]
if config.get("strategy"):
    _p = config["strategy"]
    if config["nodes"] < 2:
        config_error(
            "strategy",
            f"partitioned runs need nodes >= 2 (one partition per host, each host an address "
            f"of its own: DGL finds a process's machine by the first local address in its "
            f"ip_config); nodes is {config['nodes']}",
        )
    _fws = [f for f in GRID["frameworks"] if registry.framework(f).partitioned_adapter]
    RUNS += [
        run
        for run in points(
            ["timing"],
            sorted(_p["devices"]),
            [_p["batch_size"]],
            [0],
            _p["repeats"],
            _p.get("models"),
            part_method=_p["method"],
        )
        if run["framework"] in _fws
    ]
RUN_DIRS = [run_dir(run) for run in RUNS]
RUN_RESULTS = [os.path.join(d, "result.json") for d in RUN_DIRS]
# The timing runs of the pair lane (the grid's, and a framework's other loaders'): what the
# adaptive plan reads.
TIMING_RESULTS = [
    os.path.join(run_dir(run), "result.json")
    for run in RUNS
    if run["kind_prefix"] == KIND_PREFIXES["timing"]
    and run["lane_prefix"] == LANE_PREFIXES["pair"]
    # partitioned points are not among the plan's comparisons (a point key has no strategy)
    and run["part_prefix"] == PART_PREFIXES["replicated"]
]


class RunNumber:
    """Formats a run's result path as "i/N" (its place in the execution order).

    The run jobs' message formats "{RUN_NUMBER:{output.result}}": messages see
    the workflow's globals, and the position must not be a param, or growing the
    grid would invalidate every finished run.
    """

    def __init__(self, results):
        self.index = {path: i for i, path in enumerate(results, start=1)}

    def __format__(self, path):
        return f"{self.index.get(path, '?')}/{len(self.index)}"


def interleaved_order(results, repeats, seed, configurations=None):
    """Execution order of the runs: all of repeat 0, then repeat 1, ...: drift over the sweep
    and bursts of outside load hit every configuration alike instead of one block of runs.
    Within a repeat the configurations are shuffled, and the runs of one configuration that
    differ only in their framework (`configurations[i]` names the configuration of
    `results[i]` without it) run back to back in a shuffled order, so a drift of the machine
    hits both sides of a framework comparison alike. The shuffles are drawn from
    random.Random(seed): the order is reproducible and recorded in the config.
    `repeats[i]` is the repeat index of `results[i]`.
    """
    import random

    rng = random.Random(seed)
    configurations = configurations or results
    order = []
    for r in sorted(set(repeats)):
        block = {}
        for path, rep, conf in zip(results, repeats, configurations):
            if rep == r:
                block.setdefault(conf, []).append(path)
        confs = list(block)
        rng.shuffle(confs)
        for conf in confs:
            rng.shuffle(block[conf])
            order += block[conf]
    return order


RUN_ORDER = interleaved_order(
    RUN_RESULTS,
    [run["repeat"] for run in RUNS],
    config["run_order_seed"],
    [
        repr(sorted((k, str(v)) for k, v in run.items() if k != "framework"))
        for run in RUNS
    ],
)
_ORDER_INDEX = {path: i for i, path in enumerate(RUN_ORDER)}
RUN_NUMBER = RunNumber(RUN_ORDER)


def run_priority(wildcards):
    """Scheduling priority of a run job: earlier in RUN_ORDER = higher.

    Snakemake (>= 9) picks the highest-priority ready job first; with bench=1 only one run
    may run at a time, so runs start in RUN_ORDER (each result's started_at shows it).
    Not a param: reordering never invalidates a finished run.
    """
    keys = (
        "dataset",
        "kind_prefix",
        "lane_prefix",
        "loader_prefix",
        "part_prefix",
        "framework",
        "model",
        "devices",
        "batch",
        "workers",
        "repeat",
    )
    path = os.path.join(
        run_dir({k: getattr(wildcards, k) for k in keys}), "result.json"
    )
    return len(RUN_ORDER) - _ORDER_INDEX.get(path, len(RUN_ORDER))


def dataset_source(wildcards):
    """Where a converted dataset's raw files come from (ignored for synthetic ones)."""
    flags = []
    if config["raw_dir"]:
        flags.append(f"--raw-dir {config['raw_dir']}")
    if config["download"]:
        flags.append("--download")
    return " ".join(flags)


def run_settings(wildcards):
    """Runner flags that come from the config (runners/settings.py turns them into options).

    Only configuration goes here: as a param it is a rerun trigger, so changing
    a setting reruns the affected runs, and nothing else does.
    """
    flags = settings.sweep_flags(
        config,
        wildcards.model,
        kind_of(wildcards),
        int(wildcards.repeat),
        harness_of(wildcards),
    )
    lane = lane_of(wildcards)
    # The pair's runs pass no --lane (the runner records the lane of the Python either way),
    # so that adding lanes reruns none of them.
    if lane != "pair":
        flags = f"{flags} --lane {lane}"
    # Nor do runs of a framework's first loader pass --loader: adding loaders reruns nothing.
    loader = {p: name for name, p in LOADER_PREFIXES.items()}[wildcards.loader_prefix]
    if loader != "default":
        flags = f"{flags} --loader {loader}"
    method = {p: name for name, p in PART_PREFIXES.items()}[wildcards.part_prefix]
    if method != "replicated":
        # "slurm": each node's launcher writes the list from the job's own nodes (runners.slurm);
        # nobody can name them before the scheduler picks them.
        flags += (
            f" --strategy partitioned --part-method {method}"
            f" --ip-config {config['strategy'].get('ip_config') or 'slurm'}"
        )
    return flags


def partitions_input(wildcards):
    """A partitioned run's partitions (rule partitions), made once before its nodes start."""
    method = {p: name for name, p in PART_PREFIXES.items()}[wildcards.part_prefix]
    if method == "replicated":
        return []
    return [f"results/partitions/{wildcards.dataset}-p{config['nodes']}-{method}.json"]


def workflow_rerun():
    """The snakemake command that reruns one point of this sweep, as the report prints it (the
    aggregate appends `--forcerun` and the point's result): this invocation's profile and
    config files, relative to the project directory. A param of the aggregate only: the
    printed command is no reason to rerun a finished training run."""
    # A SLURM job re-reads the workflow inside its allocation, where the command is formatted.
    on_slurm = bool(os.environ.get("SLURM_JOB_ID"))
    words = (
        ["snakemake", "--workflow-profile", "profiles/slurm"]
        if on_slurm
        else ["snakemake", "--cores", "all", "--profile", "profiles/default"]
    )
    for path in workflow.overwrite_configfiles or []:
        rel = os.path.relpath(os.path.abspath(path), workflow.basedir)
        words += ["--configfile", path if rel.startswith("..") else rel]
    # --config values too (`make report LANES=current` adds its lane so), or a lane's point
    # would not be in the rerun's workflow at all
    overrides = dict(workflow.config_settings.config or {})
    if overrides:
        words += [
            "--config",
            *(f"{key}={yaml_flow(value)}" for key, value in overrides.items()),
        ]
    return " ".join(shlex.quote(str(w)) for w in words)


def yaml_flow(value):
    """A --config value as one line of YAML ({compare: [current]}), which snakemake parses back."""
    import yaml

    return (
        yaml.safe_dump(value, default_flow_style=True, width=10**6)
        .strip()
        .removesuffix("\n...")
    )


WORKFLOW_RERUN = workflow_rerun()


def run_resources():
    """Resources of a run job.

    bench=1 against the global limit bench=1 in profiles/default keeps timed runs
    from overlapping; everything else is read by the SLURM executor only.
    """
    res = dict(
        bench=1,
        # the runner's own limit plus start-up and teardown, in minutes
        runtime=int(config["time_limit_s"] // 60) + 15,
    )
    if config["request_gpus"]:
        # tasks_per_gpu=0: one task per node, torchrun starts the per-GPU ranks
        res["tasks_per_gpu"] = 0
        if config["nodes"] == 1:
            res["gpu"] = lambda wildcards: int(wildcards.devices)
        else:
            res["gres"] = lambda wildcards: f"gpu:{wildcards.devices}"
    if config["nodes"] > 1:
        # "mpi" makes the executor run the job script as is (not inside
        # srun -n1), so that launcher() can start one runner per node.
        res.update(nodes=config["nodes"], tasks=config["nodes"], mpi="srun")
    return res


def launcher(wildcards):
    """Command prefix that starts the runner.

    Nothing on one node. On several, srun starts one runner per node of the SLURM
    allocation; scripts/slurm_node.sh adds its node rank (SLURM_PROCID) and the first
    node as torchrun's master address (static rendezvous, see docs/workflow.md).
    """
    if config["nodes"] == 1:
        return ""
    node = os.path.join(workflow.basedir, "scripts", "slurm_node.sh")
    # SLURM_JOB_ID: the SLURM executor's job step drops every other SLURM_* variable
    # (SLURM_JOB_NODELIST too) before it runs the rule; srun finds the allocation by its id.
    return (
        ': "${SLURM_JOB_ID:?config nodes > 1 needs a SLURM allocation: '
        'use --workflow-profile profiles/slurm}"; '
        f"srun --nodes={config['nodes']} --ntasks-per-node=1 {node} "
    )


# `python -m runners.run` must import the project even when --directory points
# elsewhere (tests run in a scratch directory), and `python` in a job must be the
# interpreter running Snakemake (the project's venv) even when the venv is not
# activated; jobs inherit this environment.
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        p for p in [workflow.basedir, os.environ.get("PYTHONPATH")] if p
    ),
    PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
)


def report_outputs():
    """Outputs of the report job: the files analysis.report writes beside index.html (named
    once, in analysis: REPORT_TABLES, REPORT_PLOTS); CSV tables and PNG plots go into
    `snakemake --report`."""
    out = dict(
        html=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
        )
    )
    for name, category in REPORT_TABLES.items():
        out[f"{name}_csv"] = report(
            f"results/report/{name}.csv",
            caption=f"../report/{name}.rst",
            category=category,
            subcategory="Tables",
        )
        out[f"{name}_html"] = f"results/report/{name}.html"
    for name, (category, caption) in REPORT_PLOTS.items():
        out[f"{name}_png"] = report(
            f"results/report/{name}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory="Plots",
        )
    return out


def analysis_sources():
    """Analysis code, templates and reference data (and the registry, whose labels, colours
    and order the analysis uses), as input of aggregate/report: editing them reruns only
    those two jobs, never a training run."""
    root = os.path.join(workflow.basedir, "analysis")
    return sorted(
        os.path.join(d, f)
        for d, dirs, files in os.walk(root)
        if "__pycache__" not in d
        for f in files
        if not f.endswith(".pyc")
    ) + [registry.__file__]
