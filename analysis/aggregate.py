"""Collect run directories into one tidy table set.

    python -m analysis.aggregate --out-dir results/aggregate RUN_DIR [RUN_DIR ...]

A RUN_DIR is a run directory or any directory above run directories (searched for
result.json). Writes into --out-dir:

- runs.csv      one row per valid run: config axes, status, summary metrics, environment
                essentials, diagnosis headline and the command that reruns it; keyed by
                run_id, the run's identity (settings + dataset, see RunConfig.identity), so
                runs of two datasets never collide; run_name is the directory's name;
- epochs.csv    per epoch per rank (with that epoch's validation accuracy);
- steps.csv     every rank's steps.csv with run_id and rank columns;
- cpu.csv       every rank's cpu.csv (CPU/memory samples) with run_id and rank;
- nvml.csv      every rank's nvml.csv (its own GPU) of GPU runs with run_id and rank;
- failures.json diagnosis and condensed stacks of every run that did not end "ok";
- invalid.csv   every result that could not be used, with the reason (never silently dropped),
                including results the runner itself found to break the schema;
- history.csv   the earlier runs of every point, kept under its previous/ (runners.records.history);
                only a point's current run enters the other tables;
- datasets.json every graph the runs read, by name and content hash, with its shape (nodes,
                edges, degrees, features, classes, homophily) from its meta.json when that
                still has the runs' content hash (analysis.graphs).

node{k}/result.json of a multi-node run (written by node k > 0) is not a run: its per-rank
rows (epochs, steps, cpu) are added to node 0's run in the directory above.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import AGGREGATE_FILES, PHASE_COLUMNS
from analysis import graphs
from analysis.report import deadlocks
from runners.adapters import registry
from runners.config import field_names
from runners.records import history, rank_rows as record, result, rundir
from runners.records.rundir import RunDir

# Every setting declared as a runs.csv column (runners/settings.py), and the learning rate the
# harness trained with after --lr-scaling (result.json config.lr_effective).
CONFIG_COLUMNS = field_names("column") + ("lr_effective",)
# How well a run pinned its steady-state epoch time down (summary.precision, runners/rank/stopping.py).
PRECISION_COLUMNS = ("stopped_by", "epochs_run", "stopped_by_cap", "precision_reached", "drift_rel", "drifting",
                     "precise", "lag1_autocorr", "steady_epoch_mean_s")
# Work per rank (computed from the per-epoch records, so older results have it too).
WORK_COLUMNS = ("seed_nodes_per_rank_epoch", "seed_nodes_per_epoch_all_ranks", "train_split_seed_nodes",
                "split_passes_per_epoch")
SUMMARY_COLUMNS = (
    "train_time_s", "median_epoch_time_s", "throughput_seed_nodes_per_s", "sampled_edges_per_s",
    "final_val_acc", "startup_s", "first_loss", "last_loss",
    # Steady state, warm-up and accuracy against the dataset's target and baseline.
    "warmup_epoch_time_s", "steady_epochs", "steady_epoch_time_s", "steady_epoch_q1_s", "steady_epoch_q3_s",
    "steady_epoch_min_s", "steady_epoch_max_s", "steady_epoch_cv", "timed_to_startup_ratio",
    "best_val_acc", "target_val_acc", "time_to_target_s", "epochs_to_target", "baseline_val_acc", "converged",
    "learned",
)
# The mean time per step and per phase (summary.step_breakdown_s).
BREAKDOWN_COLUMNS = tuple(f"step_{p}" for p in PHASE_COLUMNS) + ("step_s",)
# The mean work of one step (summary.work_per_step: seeds, sampled nodes and edges, feature bytes,
# and each layer's reads, node and edge updates summed over the layers), and layer by layer
# (summary.work_per_layer, ';'-joined means, first layer first).
STEP_WORK_COLUMNS = tuple(f"step_{k}" for k, _ in record.WORK_FIELDS)
LAYER_WORK_COLUMNS = tuple(f"step_{k}" for k, _ in record.LAYER_FIELDS)
# The frameworks' packages and installation facts come from their registry entries.
ENV_COLUMNS = (
    "python", "torch", *registry.env_packages(), "numpy",
    *registry.env_facts(), "gpus", "cpu_model", "cpu_cores", "memory_bytes",
    "shm_bytes", "open_files_limit", "hostname", "platform", "git_commit", "git_dirty",
    "dataset_hash", "omp_num_threads",
)
RUN_COLUMNS = (
    ("run_id", "run_name", "status") + CONFIG_COLUMNS + ("loader_variant", "world_size", "processes", "oversubscribed")
    + SUMMARY_COLUMNS + PRECISION_COLUMNS + ("steady_seed_nodes_per_s",) + BREAKDOWN_COLUMNS
    + STEP_WORK_COLUMNS + LAYER_WORK_COLUMNS
    + ("wall_time_s", "started_at", "finished_at", "epochs_completed", "steps_per_epoch", "parameters")
    + WORK_COLUMNS + (
       "seed_base", "adapter_choices", "nvml_available", "nvml_reason", "preflight_warnings",
       "diag_cause", "diag_summary", "diag_remedy", "detected_after_s", "cpu_busy_before",
       "mem_model_bytes", "mem_peak_bytes", "mem_peak_source", "mem_limit_bytes", "mem_cgroup_peak_bytes",
       "oom_killed", "mem_host_peak_bytes", "mem_host_peaks", "mem_max_host_peak_bytes", "mem_model_sampled_bytes")
    + tuple(f"env_{k}" for k in ENV_COLUMNS)
    + ("scheduler", "scheduler_job", "scheduler_nodes")
    + ("command", "workflow_command", "previous_runs", "run_dir", "result_path")
)
# history.csv: the earlier runs of every point (runners.records.history keeps them under previous/).
HISTORY_COLUMNS = ("run_id", "run_name", "run_dir", "previous_dir", "status", "started_at", "finished_at",
                   "steady_epoch_time_s")
# epochs.csv: every rank's epochs.csv rows with the epoch's validation accuracy.
EPOCH_COLUMNS = ("run_id",) + record.EPOCH_COLUMNS + ("val_accuracy",)
INVALID_COLUMNS = ("path", "run_id", "reason")

# Per-rank CSV files copied into the aggregate, with the columns the contract promises.
RANK_FILES = {name: record.RANK_TABLES[name] for name in ("steps", "cpu", "nvml")}
NVML_COLUMNS = RANK_FILES["nvml"]


@dataclass
class Aggregate:
    """The tidy table set (in memory); `write`/`load` move it to and from a directory."""

    runs: pd.DataFrame
    epochs: pd.DataFrame
    steps: pd.DataFrame
    cpu: pd.DataFrame
    nvml: pd.DataFrame
    invalid: pd.DataFrame
    failures: list = field(default_factory=list)
    history: pd.DataFrame = field(default_factory=lambda: _frame([], HISTORY_COLUMNS))
    plan: dict = field(default_factory=dict)  # the adaptive second round's plan (analysis.repeats.second_round), if any
    datasets: list = field(default_factory=list)  # the graphs the runs read (analysis.graphs.records)

    FILES = {"runs": RUN_COLUMNS, "epochs": EPOCH_COLUMNS,
             "steps": ("run_id", "rank") + RANK_FILES["steps"],
             "cpu": ("run_id", "rank") + RANK_FILES["cpu"],
             "nvml": ("run_id", "rank") + NVML_COLUMNS, "invalid": INVALID_COLUMNS,
             "history": HISTORY_COLUMNS}

    def write(self, out_dir: Path) -> None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in self.FILES:
            getattr(self, name).to_csv(out_dir / AGGREGATE_FILES[name], index=False)
        (out_dir / AGGREGATE_FILES["failures"]).write_text(json.dumps(self.failures, indent=1, default=str))
        (out_dir / AGGREGATE_FILES["plan"]).write_text(json.dumps(self.plan, indent=1) + "\n")
        (out_dir / AGGREGATE_FILES["datasets"]).write_text(json.dumps(self.datasets, indent=1) + "\n")

    @classmethod
    def load(cls, out_dir: Path) -> "Aggregate":
        out_dir = Path(out_dir)
        frames = {name: _read_csv(out_dir / AGGREGATE_FILES[name], columns) for name, columns in cls.FILES.items()}
        # JSON files an older aggregate may lack (datasets.json came later): their empty value
        json_files = {}
        for name, empty in (("failures", []), ("plan", {}), ("datasets", [])):
            path = out_dir / AGGREGATE_FILES[name]
            json_files[name] = json.loads(path.read_text()) if path.exists() else empty
        return cls(**json_files, **frames)


# Identifiers are read as text. A git commit such as 82e2673948578c37... starts like a float with a huge
# exponent, and pandas' C parser (2.3.3) crashed on it with a segmentation fault.
# The per-layer lists stay text too ("60" of a one-layer model is not a number to re-format).
TEXT_COLUMNS = ("scheduler", "scheduler_job", "scheduler_nodes", "mem_host_peaks", "run_id", "run_name",
                "env_git_commit", "env_dataset_hash") + LAYER_WORK_COLUMNS + tuple(k for k, _ in record.LAYER_FIELDS)


def _read_csv(path: Path, columns) -> pd.DataFrame:
    """A CSV as a frame with at least `columns` (empty frame when the file is missing/empty)."""
    try:
        # identifiers stay text: a job id 123 must not come back as 123.0 beside an empty cell
        df = pd.read_csv(path, low_memory=False, dtype={c: str for c in TEXT_COLUMNS})
    except (FileNotFoundError, pd.errors.EmptyDataError):
        df = pd.DataFrame()
    for c in columns:
        if c not in df.columns:
            df[c] = pd.Series(dtype="object")
    return df


def _frame(rows, columns) -> pd.DataFrame:
    df = pd.DataFrame(list(rows))
    return df.reindex(columns=list(columns))


# -- finding result files -------------------------------------------------------------------

def _looks_like_run_dir(d: Path) -> bool:
    """A directory the runner started writing (it writes these before launching anything)."""
    return RunDir(d).is_run()


def find_results(paths) -> tuple[list, list]:
    """result.json files under `paths`, and invalid rows for places that should have one."""
    found, invalid = [], []
    for p in (Path(x).resolve() for x in paths):
        if p.is_file() and p.name == rundir.RESULT:
            found.append(p.resolve())
            continue
        if not p.is_dir():
            invalid.append({"path": str(p), "run_id": None, "reason": "no such run directory"})
            continue
        # Earlier runs (previous/) and runs in progress (staging) are not a point's current run.
        hits = sorted(h for h in p.rglob(rundir.RESULT) if not history.in_history(h.relative_to(p).parent))
        found += [h.resolve() for h in hits]
        with_result = {h.parent for h in hits}
        candidates = [p] + [d for d in p.rglob("*") if d.is_dir() and not history.in_history(d.relative_to(p))]
        candidates += [d for d in p.rglob(".*.run-*") if history.is_staging(d) and d.is_dir()
                       and history.current_result(history.point_dir(d)) is None]
        for d in candidates:
            if d not in with_result and _looks_like_run_dir(d):
                invalid.append({"path": str(d), "run_id": history.point_dir(d).name,
                                "reason": "run directory without result.json (the run never "
                                          "finished writing its result)"})
        if not hits and not _looks_like_run_dir(p):
            invalid.append({"path": str(p), "run_id": None, "reason": "no result.json found below"})
    unique = list(dict.fromkeys(found))  # the same run reached through two arguments
    return unique, invalid


# -- validation -----------------------------------------------------------------------------

def problems(data) -> list:
    """Why a parsed result.json cannot be used (empty list: usable)."""
    errors = result.schema_problems(data, message_chars=200)
    out = errors[:3]
    if len(errors) > 3:
        out.append(f"... and {len(errors) - 3} more schema errors")
    if not out and data["status"] == "ok" and data["summary"] is None:
        out.append("status is 'ok' but summary is null")
    return out


def read_result(path: Path):
    """(result dict upgraded to runners.records.result.SCHEMA_VERSION, None) or (None, reason)."""
    try:
        data = result.read(path)
    except OSError as exc:
        return None, f"unreadable: {exc}"
    except result.ResultVersionError as exc:
        return None, str(exc)
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    if data.get("schema_errors"):
        # The runner found these when it wrote the file; the measurements are on disk, but
        # fields a reader relies on may be missing or wrong.
        errors = [str(e) for e in data["schema_errors"]]
        more = f"; ... and {len(errors) - 3} more" if len(errors) > 3 else ""
        return None, "schema (found by the runner when it wrote result.json): " + "; ".join(errors[:3]) + more
    reasons = problems(data)
    if reasons:
        return None, "schema: " + "; ".join(reasons)
    return data, None


# -- flattening -----------------------------------------------------------------------------

def _scalar(v):
    """A CSV-friendly value: lists joined by commas, dicts as JSON, None kept."""
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


def commands(data: dict, run_dir: Path, workflow: str | None = None) -> dict:
    """The commands that rerun a result's point: directly, with its lane's interpreter, and
    through the workflow (`workflow`, the snakemake command of the sweep, + --forcerun its
    result; None for a run outside the working directory, or without one), and how many
    earlier runs of the point are kept. Results from before the rerun commands named their
    interpreter said `python`; runners.records.result's upgrade names the lane's interpreter instead."""
    argv = data["command"]["argv"]
    target = os.path.relpath(RunDir(run_dir).result)
    through = f"{workflow} --forcerun {shlex.quote(target)}" if workflow and not target.startswith("..") else None
    return {"command": shlex.join(argv), "workflow_command": through,
            "previous_runs": len(history.history(run_dir))}


def history_rows(run_dir: Path, run_id: str) -> list:
    """history.csv's rows of one point: each earlier run kept under its previous/."""
    rows = []
    for d, data in history.history(run_dir):
        data = data or {}
        rows.append({"run_id": run_id, "run_name": run_dir.name, "run_dir": str(run_dir), "previous_dir": str(d),
                     "status": data.get("status", "unfinished"), "started_at": data.get("started_at"),
                     "finished_at": data.get("finished_at"),
                     "steady_epoch_time_s": (data.get("summary") or {}).get("steady_epoch_time_s")})
    return rows


def config_columns(cfg: dict, env: dict) -> dict:
    """The run's settings, its loader variant and how many processes share a node's cores."""
    row = {k: _scalar(cfg.get(k)) for k in CONFIG_COLUMNS}
    # A loader other than its framework's default is an experiment of its own (loader_variant);
    # the defaults stay one experiment, so PyG and DGL's classic loader are compared point by point.
    default_loader = registry.framework(cfg["framework"]).loaders[0]
    row["loader_variant"] = "default" if row["loader"] == default_loader else row["loader"]
    row["world_size"] = cfg["devices"] * cfg["nodes"]
    # Ranks and their loader workers on one node; more of them than cores means they take
    # turns on the CPU, which a 2-core result must say before anyone reads it as a GPU claim.
    row["processes"] = cfg["devices"] * (1 + cfg["workers"])
    cores = env.get("cpu_cores")
    row["oversubscribed"] = bool(cores and row["processes"] > cores)
    return row


def summary_columns(summary: dict) -> dict:
    """The summary's metrics, how precise its steady state is, and its mean step breakdown."""
    breakdown = summary.get("step_breakdown_s") or {}
    row = {k: summary.get(k) for k in SUMMARY_COLUMNS}
    prec = summary.get("precision") or {}
    row.update({k: prec.get(k) for k in PRECISION_COLUMNS})
    row.update({f"step_{p}": breakdown.get(p) for p in PHASE_COLUMNS})
    row["step_s"] = breakdown.get("step_s")
    work = summary.get("work_per_step") or {}
    row.update({f"step_{k}": work.get(k) for k, _ in record.WORK_FIELDS})
    layers = summary.get("work_per_layer") or []
    for (k, _), column in zip(record.LAYER_FIELDS, LAYER_WORK_COLUMNS):
        part = k.removesuffix("_by_layer")
        row[column] = ";".join(f"{w[part]:g}" for w in layers) or None
    return row


def outcome_columns(data: dict, result_path: Path, workflow: str | None = None) -> dict:
    """When the run ran, how far it got, what it probed and diagnosed, and how to rerun it."""
    cfg = data["config"]
    diag = data.get("diagnosis") or {}
    per_rank_epochs = {}
    for e in data["epochs"]:
        per_rank_epochs[e["rank"]] = max(per_rank_epochs.get(e["rank"], 0), e["epoch"] + 1)
    probes = data.get("probes") or {}
    return {
        "wall_time_s": data["wall_time_s"], "started_at": data["started_at"],
        "cpu_busy_before": (data.get("machine_load") or {}).get("cpu_busy_percent_before"),
        "finished_at": data["finished_at"],
        # The least advanced rank is how far the run as a whole got.
        "epochs_completed": min(per_rank_epochs.values()) if per_rank_epochs else 0,
        "steps_per_epoch": record.steps_per_epoch(data["ranks"]),
        # The model's parameter count (every rank builds the same model): the size of the
        # gradient each step all-reduces, which analysis/projection/predict.py scales to more devices.
        "parameters": next((r["parameters"] for r in data["ranks"] if r.get("parameters")), None),
        "seed_base": data["seeds"]["base"],
        "adapter_choices": _scalar(cfg.get("adapter_choices")),
        "nvml_available": (probes.get("nvml") or {}).get("available"),
        "nvml_reason": (probes.get("nvml") or {}).get("reason"),
        "preflight_warnings": " | ".join((data.get("preflight") or {}).get("warnings") or []) or None,
        "diag_cause": diag.get("cause"), "diag_summary": diag.get("summary"),
        "diag_remedy": diag.get("remedy"), "detected_after_s": diag.get("detected_after_s"),
        **commands(data, result_path.parent, workflow), "run_dir": str(result_path.parent),
        "result_path": str(result_path),
    }


def memory_columns(data: dict) -> dict:
    """Modelled vs measured peak host memory (runners.memory.model, runners.memory.peak); a
    skipped point has neither, only its cap."""
    cfg, env = data["config"], data["env"]
    mem = data.get("memory") or {}
    diag = data.get("diagnosis") or {}
    return {
        "mem_model_bytes": mem.get("model_bytes"),
        "mem_peak_bytes": mem.get("peak_bytes"), "mem_peak_source": mem.get("peak_source"),
        "mem_limit_bytes": mem.get("limit_bytes") or cfg.get("memory_limit_bytes") or None,
        "mem_cgroup_peak_bytes": mem.get("cgroup_peak_bytes"),
        "oom_killed": ", ".join(k["role"] for k in (diag.get("oom") or {}).get("killed", [])) or None,
        "mem_host_peak_bytes": host_peak(data),  # node 0's; every host's: aggregate() adds host_peak_columns
        # the model of the processes a partitioned host's peak covers (server + trainers, no torchrun agent)
        "mem_model_sampled_bytes": ((env.get("partitioned") or {}).get("server") or {}).get("memory", {}).get(
            "model_sampled_bytes"),
    }


def run_row(data: dict, result_path: Path, workflow: str | None = None) -> dict:
    """One runs.csv row (`workflow`: see commands)."""
    summary = data.get("summary") or {}
    row = {"run_id": data["run_id"], "run_name": data.get("run_name", result_path.parent.name),
           "status": data["status"]}
    row.update(config_columns(data["config"], data["env"]))
    row.update(summary_columns(summary))
    row.update(outcome_columns(data, result_path, workflow))
    row.update(memory_columns(data))
    row.update(work_per_rank(data))
    # Throughput of the steady state: one epoch's seed nodes (all ranks) per steady epoch, so
    # runs that stopped after different numbers of epochs weigh their warm-up alike (not at all).
    seeds, steady = row.get("seed_nodes_per_epoch_all_ranks"), summary.get("steady_epoch_time_s")
    row["steady_seed_nodes_per_s"] = seeds / steady if seeds and steady else None
    row.update(env_columns(data["env"]))
    return row


def host_peak(data: dict):
    """The peak memory of the host whose result `data` is: a partitioned run's graph server and
    trainers (runners.partitioned.server, env.partitioned.server.memory); else its ranks and workers."""
    if (data["config"].get("strategy") or "replicated") == "partitioned":
        return ((data["env"].get("partitioned") or {}).get("server") or {}).get("memory", {}).get("host_peak_bytes")
    return (data.get("memory") or {}).get("peak_bytes")


def host_peak_columns(peaks: dict, nodes: int) -> dict:
    """mem_host_peaks (every host's peak in node order, comma-joined, empty where a host's result
    has none) and mem_max_host_peak_bytes (the largest; None unless every host's is known: the
    largest of some hosts would pass for the run's)."""
    values = [peaks.get(k) for k in range(max(int(nodes or 1), 1))]
    known = [v for v in values if v is not None]
    return {"mem_host_peaks": ",".join("" if v is None else str(int(v)) for v in values),
            "mem_max_host_peak_bytes": max(known) if known and len(known) == len(values) else None}


def env_columns(env: dict) -> dict:
    """runs.csv's environment essentials and the batch scheduler around the launcher."""
    row = {f"env_{k}": _scalar(env.get(k)) for k in ENV_COLUMNS}
    row["env_gpus"] = ", ".join(str(g.get("name", g)) if isinstance(g, dict) else str(g)
                                for g in env.get("gpus") or []) or None
    row["env_omp_num_threads"] = (env.get("rank_env_vars") or {}).get("OMP_NUM_THREADS")
    # Node 0's scheduler for a multi-node run (the job's nodes); results from before it was
    # recorded have none.
    sched = env.get("scheduler") or {}
    row["scheduler"] = sched.get("name")
    row["scheduler_job"] = sched.get("job_id")
    row["scheduler_nodes"] = sched.get("nodelist")
    return row


def work_per_rank(data: dict) -> dict:
    """The summary's work-per-rank figures, recomputed from the epoch records so that results
    without them (older runs, failed runs) get them too."""
    cfg = data["config"]
    return record.seed_work(data["epochs"], cfg["devices"] * cfg["nodes"],
                     (data.get("summary") or {}).get("train_split_seed_nodes"))


def epoch_rows(data: dict, run_id=None) -> list:
    """epochs.csv rows of one result (under `run_id`, default its own)."""
    acc = {v["epoch"]: v["accuracy"] for v in data["validation"]}
    rows = []
    for e in data["epochs"]:
        row = {k: e.get(k) for k in EPOCH_COLUMNS if k not in ("run_id", "val_accuracy")}
        row["run_id"] = run_id or data["run_id"]
        row["val_accuracy"] = acc.get(e["epoch"])
        rows.append(row)
    return rows


def rank_csvs(run_dir: Path, run_id: str, name: str) -> list:
    """rank*/NAME.csv of one run, each with run_id and rank columns (missing files skipped)."""
    frames = []
    for rank, _ in RunDir(run_dir).ranks():
        path = RunDir(run_dir).rank_file(rank, name)
        if not path.exists():
            continue
        df = _read_csv(path, RANK_FILES[name])
        if df.empty:
            continue
        df.insert(0, "rank", rank)
        df.insert(0, "run_id", run_id)
        frames.append(df)
    return frames


@dataclass
class _Rows:
    """The tables' rows as the results are read, before they become frames."""

    invalid: list
    runs: list = field(default_factory=list)
    epochs: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    cpu: list = field(default_factory=list)
    nvml: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    history: list = field(default_factory=list)
    graphs: dict = field(default_factory=dict)

    def add_run(self, data: dict, path: Path, workflow: str | None) -> None:
        """Node 0's result (the run) with its history, epochs and ranks' tables."""
        rid, run_dir = data["run_id"], path.parent
        self.runs.append(run_row(data, path, workflow))
        graphs.collect(self.graphs, data)
        self.history += history_rows(run_dir, rid)
        self.epochs += epoch_rows(data)
        self.steps += rank_csvs(run_dir, rid, "steps")
        self.cpu += rank_csvs(run_dir, rid, "cpu")
        self.nvml += rank_csvs(run_dir, rid, "nvml")  # each rank samples its own GPU
        if data["status"] not in ("ok", "skipped"):  # skipped points never ran: nothing to diagnose
            self.failures.append(deadlocks.failure_record(data, run_dir))

    def join_nodes(self, node_results: list) -> None:
        """A node's per-rank rows and its host's memory join its run (node 0's result sits one
        directory above it)."""
        parents = {Path(r["run_dir"]): r for r in self.runs}
        host_peaks = {d: {0: r["mem_host_peak_bytes"]} for d, r in parents.items()}
        for path, data, node in node_results:
            rid = (parents.get(path.parent.parent) or {}).get("run_id")
            if rid is None:
                self.invalid.append({"path": str(path), "run_id": data["run_id"],
                                     "reason": f"node {node} of a multi-node run whose node-0 result "
                                               f"({RunDir(path.parent.parent).result}) is not among the "
                                               "results; not a run of its own"})
                continue
            host_peaks[path.parent.parent][node] = host_peak(data)
            self.epochs += epoch_rows(data, rid)
            self.steps += rank_csvs(path.parent, rid, "steps")
            self.cpu += rank_csvs(path.parent, rid, "cpu")
        for d, r in parents.items():
            r.update(host_peak_columns(host_peaks[d], r.get("nodes")))

    def tables(self) -> Aggregate:
        """The rows as the tidy table set."""

        def concat(frames, columns):
            return pd.concat(frames, ignore_index=True) if frames else _frame([], columns)

        return Aggregate(
            runs=_frame(self.runs, RUN_COLUMNS), epochs=_frame(self.epochs, EPOCH_COLUMNS),
            steps=concat(self.steps, Aggregate.FILES["steps"]), cpu=concat(self.cpu, Aggregate.FILES["cpu"]),
            nvml=concat(self.nvml, Aggregate.FILES["nvml"]), invalid=_frame(self.invalid, INVALID_COLUMNS),
            failures=deadlocks.sort_failures(self.failures), history=_frame(self.history, HISTORY_COLUMNS),
            datasets=graphs.records(self.graphs),
        )


def aggregate(paths, workflow: str | None = None) -> Aggregate:
    """Read, validate and flatten every result under `paths` (`workflow`: the snakemake
    command of the sweep, for the rerun commands; see commands)."""
    files, invalid = find_results(paths)
    rows = _Rows(invalid)
    seen, node_results = {}, []
    for path in files:
        data, reason = read_result(path)
        if data is None:
            invalid.append({"path": str(path), "run_id": path.parent.name, "reason": reason})
            continue
        node = data["config"].get("node_rank") or 0
        if node > 0:
            # Node k of a multi-node run writes OUT/node{k}/result.json: part of node 0's
            # run, not a run of its own.
            node_results.append((path, data, node))
            continue
        rid = data["run_id"]  # the identity (settings + dataset), not the directory name
        if rid in seen:
            invalid.append({"path": str(path), "run_id": rid,
                            "reason": f"duplicate run: same identity (settings, dataset and repeat) "
                                      f"as {seen[rid]}; give repeats distinct --repeat values"})
            continue
        seen[rid] = path
        rows.add_run(data, path, workflow)
    rows.join_nodes(node_results)
    return rows.tables()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", required=True, help="directory for runs.csv, epochs.csv, ...")
    p.add_argument("--workflow", default=None, metavar="COMMAND",
                   help="the snakemake command of the sweep; each run's rerun through it (+ --forcerun its "
                        "result) goes into runs.csv")
    p.add_argument("--plan", default=None, metavar="FILE",
                   help="the adaptive second round's plan (python -m analysis.repeats.second_round), for the report")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="run directories, or directories to search for result.json")
    args = p.parse_args(argv)
    agg = aggregate(args.run_dirs, args.workflow)
    if args.plan:
        agg.plan = json.loads(Path(args.plan).read_text())
    agg.write(Path(args.out_dir))
    counts = agg.runs["status"].value_counts().to_dict()
    print(f"[analysis] {len(agg.runs)} runs ({', '.join(f'{k}: {v}' for k, v in counts.items()) or 'none'}), "
          f"{len(agg.invalid)} invalid -> {args.out_dir}")
    for row in agg.invalid.itertuples():
        print(f"[analysis]   invalid: {row.path}: {row.reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
