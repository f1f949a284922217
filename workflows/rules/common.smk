"""Config validation, the sweep grid and helpers shared by the rule files.

Everything here runs at parse time, so a bad config fails before any job starts. The sweep's
grammar (the checks beyond the schema, the runs of each config block, their names and order,
the rerun command) is runners/sweep.py; this file hands it to Snakemake.
"""

import json
import os
from pathlib import Path
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The schema names the offending key and its allowed values; it also fills defaults.
validate(config, "../schemas/config.schema.yaml")


# Frameworks and models, with every model's default settings, come from the registry
# (runners/adapters/registry.py; light, no torch), so the config names only overrides.
if workflow.basedir not in sys.path:
    sys.path.insert(0, workflow.basedir)
from runners import datasets  # noqa: E402 (numpy only: the dataset names)
from runners import sweep  # noqa: E402 (the sweep's grammar)
from runners.adapters import registry  # noqa: E402
from analysis.repeats import plan_file  # noqa: E402 (whether a plan is stale)
from analysis import caption_name, declared  # noqa: E402

# the files analysis.report writes
from analysis import AGGREGATE_FILES, REPORT_PLOTS, REPORT_TABLES  # noqa: E402

# Cross-field rules the schema cannot express; the user's graphs are under the working
# directory's results/datasets, the lanes' environments beside the Snakefile.
try:
    sweep.check(config, workflow.basedir, "results/datasets")
except sweep.ConfigError as _exc:
    raise WorkflowError(str(_exc)) from None

DEVICES = sweep.resolve_devices(config)  # grid.devices "all": this node's

# Run jobs take every core given to Snakemake, so no other job shares the CPU
# during a timed run. Cluster executors have no such total (cores is None): there
# the allocation size comes from set-threads in profiles/slurm.
MACHINE_THREADS = workflow.resource_settings.cores or 1


# Wildcards are restricted so that run names parse back unambiguously (runners.sweep.parse
# matches names with the same expressions).
wildcard_constraints:
    **sweep.WILDCARD_PATTERNS,


# A run's name, written once (runners.sweep): the run rule's output and log use it.
RUN_NAME = sweep.RUN_NAME
RUN_DIR = sweep.RUN_DIR


def lane_python(wildcards):
    """The interpreter of the run's lane: the one running Snakemake (the pair's .venv) for
    the pair, the lane's own for the others."""
    lane = sweep.from_wildcards(wildcards).lane
    return "python" if lane == "pair" else sweep.interpreter(lane, workflow.basedir)


# One entry per run (runners.sweep.Run), in a stable order: the grid, then the convergence
# runs, the study-harness runs and the other blocks when the config asks for them.
RUNS = sweep.first_round(config, DEVICES)
RUN_RESULTS = [run.result for run in RUNS]
# What the adaptive plan reads.
TIMING_RESULTS = [run.result for run in RUNS if sweep.planned_by_adaptive(run)]
# The execution order; the run jobs' message formats "{RUN_NUMBER:{output.result}}" as "i/N".
RUN_NUMBER = sweep.Schedule(RUNS, config["run_order_seed"])


def run_priority(wildcards):
    """Scheduling priority of a run job: earlier in the order = higher (sweep.Schedule)."""
    return RUN_NUMBER.priority(sweep.from_wildcards(wildcards))


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
    return sweep.run_flags(config, sweep.from_wildcards(wildcards))


def partitions_input(wildcards):
    """A partitioned run's partitions (rule partitions), made once before its nodes start."""
    method = sweep.from_wildcards(wildcards).part_method
    if method == "replicated":
        return []
    return [f"results/partitions/{wildcards.dataset}-p{config['nodes']}-{method}.json"]


# The command that reruns one point, as the report prints it: a param of the aggregate only,
# since the printed command is no reason to rerun a finished training run. A SLURM job re-reads
# the workflow inside its allocation, where the command is formatted.
WORKFLOW_RERUN = sweep.rerun_command(
    workflow.overwrite_configfiles,
    dict(workflow.config_settings.config or {}),
    workflow.basedir,
    on_slurm=bool(os.environ.get("SLURM_JOB_ID")),
)


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
    for name, asset in declared(REPORT_TABLES).items():
        out[f"{name}_csv"] = report(
            f"results/report/{name}.csv",
            caption=f"../report/{caption_name(name, asset)}.rst",
            category=asset.section,
            subcategory="Tables",
        )
        out[f"{name}_html"] = f"results/report/{name}.html"
    for name, asset in declared(REPORT_PLOTS).items():
        out[f"{name}_png"] = report(
            f"results/report/{name}.png",
            caption=f"../report/{caption_name(name, asset)}.rst",
            category=asset.section,
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
