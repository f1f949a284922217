"""The HTML report: answers first, then one section per question of the study, the findings,
the deadlock report, environment and fairness.

This module assembles and renders: it builds the environment, fairness, plan and run-list
frames, writes every table and plot as an asset and renders the page from them; the answers on
the first screen come from analysis.answers, the findings from analysis.findings, the tables from
analysis.tables. On the page every table is folded under <details>, and a figure with nothing to
compare (one point, a baseline alone) is left out with one line saying why; its asset is
written all the same.

    python -m analysis.report --aggregate results/aggregate --out results/report/index.html \
        [--assets results/report]

The page is self-contained (inline CSS, images as data URIs, no script, nothing fetched), so it
opens offline and can be mailed. Every table (CSV + HTML fragment) and plot (PNG) is also
written to --assets under the fixed names in ASSETS, for Snakemake to declare and caption.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import functools
import json
import sys
from collections import Counter
from pathlib import Path

import jinja2
import pandas as pd

from analysis import FRAMEWORK_ORDER, REPORT_PLOTS, REPORT_TABLES, STATUS_COLOURS, framework_label, model_label
from analysis import answers, deadlocks, lanes, loaders, partitioned, planning, plots, project, speedup_gap, tables
from analysis.aggregate import Aggregate
from analysis.display import TableSet, frame_table, row_anchor
from analysis.findings import all_findings, precision_findings, study_findings
from analysis.formatting import fmt_bytes, fmt_duration, fmt_pct
from analysis.grouping import add_experiment, paper_order, performance_points, performance_runs, truthy
from runners.adapters import registry

TEMPLATES = Path(__file__).resolve().parent / "templates"
TABLE_NAMES = tuple(REPORT_TABLES)  # declared once in analysis/__init__.py (the workflow reads them there)
PLOT_NAMES = tuple(REPORT_PLOTS)
# A section shows the panels of the experiment its answer speaks for, at a readable size; the
# figure of every experiment's panels (NAME_all) is folded under it.
FULL_GRIDS = {"runtime_vs_devices": "runtime_vs_devices_all", "breakdown": "breakdown_all"}
# Every file the report writes beside index.html (Snakemake declares these as outputs).
ASSETS = tuple(f"{t}.{ext}" for t in TABLE_NAMES for ext in ("csv", "html")) + tuple(f"{p}.png" for p in PLOT_NAMES)


# -- environment, fairness and run list -----------------------------------------------------

def _distinct(series) -> str:
    """Distinct values, with counts when they differ between runs."""
    vals = series.dropna().astype(str)
    vals = vals[vals != ""]
    if vals.empty:
        return "—"
    c = Counter(vals)
    if len(c) == 1:
        return next(iter(c))
    return "; ".join(f"{v} ({n} runs)" for v, n in c.most_common())


ENV_ROWS = (
    ("hosts", "env_hostname"), ("batch scheduler", "scheduler"), ("CPU", "env_cpu_model"), ("CPU cores", "env_cpu_cores"),
    ("GPUs", "env_gpus"), ("device type", "device_type"), ("process-group backend", "backend"),
    ("NVML probe", "nvml_reason"), ("Python", "env_python"), ("torch", "env_torch"),
    ("torch_geometric", "env_torch_geometric"), ("PyG sampler backend", "env_pyg_sampler_backend"),
    ("pyg-lib", "env_pyg_lib"), ("torch-sparse", "env_torch_sparse"), ("DGL", "env_dgl"),
    ("DGL CUDA build", "env_dgl_cuda"), ("numpy", "env_numpy"), ("OMP_NUM_THREADS", "env_omp_num_threads"),
    ("/dev/shm size", "env_shm_bytes"), ("memory", "env_memory_bytes"), ("open-files limit", "env_open_files_limit"),
    ("git commit", "env_git_commit"), ("uncommitted changes", "env_git_dirty"),
    ("pre-flight warnings", "preflight_warnings"),
)


def _bytes(v):
    return None if pd.isna(v) else fmt_bytes(float(v))


def environment_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Setting -> the distinct values the runs recorded (hosts, CPU, package versions, ...)."""
    rows = []
    for label, col in ENV_ROWS:
        values = runs[col] if col in runs else pd.Series(dtype=object)
        if col in ("env_shm_bytes", "env_memory_bytes"):
            values = values.map(_bytes)
        rows.append({"setting": label, "value": _distinct(values)})
    for ds, g in runs.groupby("dataset"):
        rows.append({"setting": f"dataset {ds} content hash", "value": _distinct(g["env_dataset_hash"])})
    return pd.DataFrame(rows, columns=["setting", "value"])


def _choices(runs, key) -> pd.Series:
    def get(text):
        try:
            return json.loads(text).get(key)
        except (TypeError, ValueError, AttributeError):
            return None
    return runs["adapter_choices"].map(get)


LOOP_MODELS = [m for m in registry.MODELS.values() if m.self_loops]  # models --no-self-loops changes

FAIRNESS_ROWS = (
    ("fan-outs as given (hop nearest the seeds first)", lambda r: r["fanouts"]),
    ("fan-outs as passed to the framework's sampler", lambda r: r["fanouts_framework"]),
    ("loader (--loader)", lambda r: r["loader"]),
    ("each loader's sampling: replacement, self-loops",
     lambda r: r["loader"] + ": " + r["replace"].map(lambda v: "with" if truthy(v) else "without")
     + " replacement; self-loops: " + _choices(r, "self_loops").fillna("none")),
    ("sampler", lambda r: _choices(r, "sampler")),
    ("PyG sampler backend (recorded per run)", lambda r: r["env_pyg_sampler_backend"].where(r["framework"] == "pyg")),
    (f"self-loops ({', '.join(m.label for m in LOOP_MODELS)})",
     lambda r: r["self_loops"].where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("self-loop implementation", lambda r: _choices(r, "self_loops").where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("sampling with replacement", lambda r: r["replace"]),
    ("PyG layer trimming", lambda r: r["pyg_trim"].where(r["framework"] == "pyg")),
    ("model layer (per model)", lambda r: _choices(r, "layer")),
    ("layer computation", lambda r: _choices(r, "layer_compute")),
    ("training harness (fair: the suite's DDP loop; study: the seed study's Lightning harness)",
     lambda r: r["harness"] if "harness" in r else None),
    ("seed split across ranks", lambda r: _choices(r, "seed_split")),
    ("uneven batches (naive split)", lambda r: r["uneven_batches"]),
    ("graph input", lambda r: _choices(r, "graph_input")),
    ("where node features are gathered", lambda r: _choices(r, "feature_gather")),
    ("batch preparation (timed as its own phase)", lambda r: _choices(r, "batch_prepare")),
    ("what a sampled-edge count counts", lambda r: _choices(r, "sampled_edges")),
    ("warm-up (outside the steady-state time)", lambda r: r["framework"].map(lambda _: "first epoch")),
    ("accuracy target / features-only baseline", lambda r: _accuracy_reference(r)),
    ("learning rate", lambda r: r["lr"]),
    ("LR scaling with processes", lambda r: r["lr_scaling"]),
    ("effective LR", lambda r: r["lr_effective"]),
    ("weight decay", lambda r: r["weight_decay"]),
    *((f"{m.label} {' / '.join(m.settings)}", lambda r, m=m: _model_arch(r, m)) for m in registry.MODELS.values()),
    ("threads per rank (by devices)", lambda r: r["devices"].astype(str) + " dev: " + r["threads_per_rank"].astype(str)),
    ("base seeds", lambda r: r["seed_base"]),
    ("per-phase step timing", lambda r: r["breakdown"]),
    ("probes (CPU/NVML samplers)", lambda r: r["probes"]),
)


def _accuracy_reference(runs):
    def pct(v):
        return "—" if pd.isna(v) else f"{100 * float(v):.1f}%"
    return pd.to_numeric(runs["target_val_acc"], errors="coerce").map(pct) + " / " + \
        pd.to_numeric(runs["baseline_val_acc"], errors="coerce").map(pct)


def _model_arch(runs, model):
    """'3 / 256 / 0.5': the settings `model` (a registry.Model) uses, for its runs only."""
    parts = [runs[k].astype(str) for k in model.settings]
    return functools.reduce(lambda x, y: x + " / " + y, parts).where(runs["model"] == model.name)


def fairness_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Setting -> values per framework, so differences between the frameworks are visible."""
    fws = [f for f in FRAMEWORK_ORDER if f in set(runs["framework"])]
    rows = []
    for label, fn in FAIRNESS_ROWS:
        try:
            values = fn(runs)
        except (KeyError, TypeError, AttributeError):
            continue
        row = {"setting": label}
        for f in fws:
            row[framework_label(f)] = _distinct(values[runs["framework"] == f])
        rows.append(row)
    return pd.DataFrame(rows, columns=["setting"] + [framework_label(f) for f in fws])


STOP_TEXT = {"precise": "precise", "schedule": "schedule", "epoch_cap": "CAP: epochs", "time_cap": "CAP: seconds"}


def _stop_text(r) -> str | None:
    """Why a run stopped; a cap (the epoch time not yet precise) is flagged, with drift if seen."""
    text = STOP_TEXT.get(r.get("stopped_by")) if isinstance(r.get("stopped_by"), str) else None
    if text and text.startswith("CAP") and truthy(r.get("drifting")):
        text += " (drifting)"
    return text


def plan_frame(plan: pd.DataFrame) -> pd.DataFrame:
    """The plan (analysis.planning) with readable columns and times in ms/s/min."""
    cols = {"experiment": "experiment", "framework": "framework", "model": "model", "devices": "devices",
            "batch_size": "batch", "workers": "workers", "runs": "repeats", "epochs_used": "epochs used (median)",
            "epoch_s": "epoch", "within_cv": "CV within a run", "between_cv": "CV between launches",
            "launch_s": "launch cost", "precision_now": "95% CI ± now (rel.)", "cost_now_s": "cost now",
            "plan_epochs": "plan: epochs per run", "plan_repeats": "plan: repeats",
            "plan_cost_s": "plan: cost"}
    df = plan.reindex(columns=list(cols)).rename(columns=cols)
    df["framework"] = df["framework"].map(framework_label)
    df["model"] = df["model"].map(model_label)
    for c in ("CV within a run", "CV between launches", "95% CI ± now (rel.)"):
        df[c] = df[c].map(lambda v: None if pd.isna(v) else fmt_pct(v))
    for c in ("epoch", "launch cost", "cost now", "plan: cost"):
        df[c] = df[c].map(lambda v: None if pd.isna(v) else fmt_duration(v))
    return df


def memory_frame(memory: pd.DataFrame) -> pd.DataFrame:
    """The memory model table (tables.memory_model_table) with bytes in MiB/GiB."""
    out = memory.copy()
    for c in ("mem_model_bytes", "mem_peak_bytes", "mem_cgroup_peak_bytes", "mem_limit_bytes"):
        if c in out:
            out[c] = pd.to_numeric(out[c], errors="coerce").map(lambda v: None if pd.isna(v) else fmt_bytes(v))
    for c in ("peak_over_model", "model_over_limit"):
        out[c] = pd.to_numeric(out[c], errors="coerce").map(lambda v: None if pd.isna(v) else f"{v:.2f}×")
    return out.rename(columns={"mem_model_bytes": "modelled peak", "mem_peak_bytes": "measured peak",
                               "mem_cgroup_peak_bytes": "cgroup peak", "mem_limit_bytes": "limit",
                               "peak_over_model": "measured / modelled", "model_over_limit": "modelled / limit",
                               "oom_killed": "OOM-killed", "measured": "measured processes"})


def runs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run with readable columns, why it stopped and the command that reruns it."""
    cols = {"experiment": "experiment", "framework": "framework", "model": "model", "devices": "devices",
            "batch_size": "batch", "workers": "workers", "repeat": "repeat", "status": "status",
            "started_at": "started", "train_time_s": "train time (s)",
            "steady_epoch_time_s": "steady epoch (s)", "warmup_epoch_time_s": "warm-up epoch (s)",
            "epochs_run": "epochs", "stop": "stopped by", "precision_reached": "95% CI ± (rel.)",
            "final_val_acc": "val acc", "converged": "converged", "time_to_target_s": "time to target (s)",
            "scheduler_job": "job", "scheduler_nodes": "nodes", "previous_runs": "earlier runs kept",
            "workflow_command": "rerun through the workflow", "command": "rerun directly"}
    df = paper_order(runs, ["experiment", "model", "framework", "devices", "batch_size", "workers", "repeat"])
    df = df.assign(stop=df.apply(_stop_text, axis=1) if not df.empty else None)
    if "scheduler" in df and not df.empty:
        # "slurm 123": which scheduler's job ran it; nothing for runs started by hand or locally
        df["scheduler_job"] = [f"{s} {j}" if isinstance(j, str) else None
                               for s, j in zip(df["scheduler"], df["scheduler_job"])]
    df = df.reindex(columns=list(cols)).rename(columns=cols)
    df["framework"] = df["framework"].map(framework_label)
    df["model"] = df["model"].map(model_label)
    return df


# -- assembling -----------------------------------------------------------------------------

def png_data_uri(path: Path) -> str:
    """A PNG file as a data URI, so the page embeds its images."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def adaptive_frame(plan: dict) -> pd.DataFrame:
    """The second round's plan, one row per first-screen answer, half-widths as ±%."""
    pm = lambda v: f"±{100 * v:.1f}%"  # noqa: E731
    return pd.DataFrame([{"answer": r["answer"], "comparisons": r["comparisons"],
                          "half-width after round 1": pm(r["measured_half_width"]), "repeats added": r["added"],
                          "projected half-width": pm(r["projected_half_width"]), "status": r["status"]}
                         for r in plan.get("answers") or []])


def adaptive_comparisons(plan: dict) -> pd.DataFrame:
    """The plan's per-configuration comparisons (the CSV beside the table)."""
    return pd.DataFrame(plan.get("comparisons") or [])


def adaptive_findings(plan: dict) -> list:
    """What the second round did and why; how many comparisons are settled on their own, and
    what the open ones would cost."""
    if not plan or "answers" not in plan:
        return []
    answers, comps = plan["answers"], plan["comparisons"]
    wide = [a for a in answers if a["measured_half_width"] > plan["precision"]]
    added = sum(p["added"] for p in plan["points"])
    left = [a for a in answers if a["projected_half_width"] > plan["precision"]]
    text = (f"Second round: {len(wide)} of {len(answers)} answers were wider than ±{100 * plan['precision']:g}% "
            f"after {plan['first_round']} repeats (launch noise SD {plan['pooled_log_sd']:.3f} on "
            f"{plan['pooled_dof']} dof), so {added} more runs went to {len(plan['points'])} points "
            f"(about {plan['planned_s'] / 60:.1f} of a {plan['budget_s'] / 60:g} min budget, at most "
            f"{plan['max_repeats']} runs a point).")
    if left:
        text += f" {len(left)} stay projected wider than that: the budget or the cap ended them."
    settled = [c for c in comps if c["status"] == "settled"]
    if comps:
        need = [c for c in comps if c["status"] != "settled" and c["to_settle_runs"] > 0]
        text += (f" Per configuration, {len(settled)} of {len(comps)} comparisons are within ±"
                 f"{100 * plan['precision']:g}% on their own"
                 + (f"; settling the other {len(need)} would take {sum(c['to_settle_runs'] for c in need)} more "
                    f"runs (about {sum(c['to_settle_min'] for c in need):.0f} min)." if need else "."))
    return [text]


def build_tables(agg: Aggregate, runs: pd.DataFrame, projection: dict | None = None) -> dict:
    """name -> TableSet: the analysis tables, then plan, deadlocks, environment, fairness and run lists;
    `projection`: analysis.project.project's frames (its tables are empty without)."""
    out = tables.all_tables(runs)
    out.update(project.report_tables(projection))
    out["lanes"] = lanes.lanes_table(runs)
    out["loaders"] = loaders.loaders_table(runs)
    out["partitioned"] = partitioned.partitioned_table(runs)
    out["speedup_gap"] = speedup_gap.gap_table(speedup_gap.gap_data(runs, agg.epochs, agg.steps))
    memory = tables.memory_model_table(runs)
    if not memory.empty:  # the pre-flight memory model against the measured peak
        out["memory_model"] = frame_table(
            memory_frame(memory), "memory_model", "Memory model vs measured peak",
            "Per configuration: the pre-flight model of peak host memory (runners/memory/model.py: ranks, "
            "loader workers, batches in flight, dataset copies; a partitioned host's partition and graph server), "
            "the highest measured peak of the same processes (PSS of ranks and workers at the worst sample; "
            "for a partitioned run node 0's graph server and trainers sampled together, against their model "
            "without the torchrun agent), the memory cgroup's own peak and which processes the "
            "out-of-memory killer took when the run had a --memory-limit (docs/memory.md).",
            )
        out["memory_model"].data = memory  # the CSV keeps the bytes
    plan = planning.plan_data(performance_runs(runs))
    out["plan"] = frame_table(
        plan_frame(plan), "plan", "Plan the next sweep",
        "Per timing configuration: the noise within a run (CV of the steady epochs) and between launches "
        "(CV of the run means beyond what the within-run noise explains), the cost of a launch (start-up, "
        "warm-up, validation) and of an epoch, the precision the repeats reached now (95% CI of the mean "
        f"epoch time over repeats, relative), and the cheapest plan for ±{100 * planning.PLAN_PRECISION:.0f}%: "
        "epochs per run "
        "sqrt(launch cost × within variance / (epoch cost × between variance)) within the caps, and the repeats "
        "that then reach it (Kalibera & Jones, ISMM 2013; analysis/planning.py).",
        empty_text="No timing run with the stop rule (--until precise) has finished ok.", group_col="experiment",
        row_id=lambda r: row_anchor("plan", r["experiment"], r["framework"], r["model"], r["devices"], r["batch"],
                                    r["workers"]))
    out["plan"].data = plan  # the CSV keeps the raw numbers
    out["adaptive"] = frame_table(
        adaptive_frame(agg.plan), "adaptive", "Second round: repeats where an answer was open",
        "Every first-screen answer (analysis/adaptive.py: the geometric mean of its comparisons over the "
        "configurations): the 95% interval's half-width after the first round, the repeats the second round "
        "added to its points, and the half-width those are projected to give, at the launch noise pooled over "
        "the first round. Repeats go only where the interval was wider than the precision asked for (config "
        "`adaptive`), within its time budget; where the interval lies plays no part. The CSV lists every "
        "comparison per configuration, whether it is settled on its own, and what settling it would cost.",
        empty_text="No second round: config `adaptive` is off, or the first round left nothing to plan.")
    out["adaptive"].data = adaptive_comparisons(agg.plan)
    out["deadlocks"] = TableSet(
        "deadlocks", "Deadlock and failure report", "Every run that did not end ok.",
        deadlocks.failures_frame(agg.failures), body=deadlocks.render_html(agg.failures))
    out["environment"] = frame_table(environment_frame(runs), "environment", "Environment",
                                     "What the runs ran on (distinct values; counts when they differ).")
    out["fairness"] = frame_table(fairness_frame(runs), "fairness", "Fairness settings",
                                  "What each framework was given; a value that differs between the "
                                  "columns is a deliberate, recorded framework difference.")
    out["runs"] = frame_table(runs_frame(runs), "runs", "All runs",
                              "Every valid run with the commands that rerun it from the project directory: "
                              "through the workflow (Snakemake redoes the point and then the report) or directly "
                              "(the run alone, with its lane's interpreter). A rerun never deletes a measured "
                              "run: the one it replaces moves to the point's previous/ (results/aggregate/"
                              "history.csv lists them).",
                              code_cols=("rerun through the workflow", "rerun directly"), status_col="status",
                              empty_text="No valid runs.", group_col="experiment")
    out["invalid"] = frame_table(agg.invalid.reindex(columns=["path", "run_id", "reason"]), "invalid",
                                 "Malformed results", "Results that could not be used, and why.",
                                 code_cols=("path",), empty_text="Every result file was valid.")
    return out


def build_figures(agg: Aggregate, runs: pd.DataFrame, points: pd.DataFrame, scaling: pd.DataFrame,
                  gap: pd.DataFrame | None = None, speed: pd.DataFrame | None = None, data: dict | None = None,
                  projection: dict | None = None, experiment=None) -> dict:
    """name -> (figure factory, caption). Factories so each figure is closed right after saving;
    `gap`: speedup_gap.gap_data (computed here when not given); `speed`: the rows of
    tables.speed_data the summary figure shows (the answers' experiment); `data`: figure name ->
    the frame it draws, where it draws less than all points (default: all); `projection`:
    analysis.project.project's frames, drawn for `experiment` (the answers')."""
    selected = plots.select_resource_runs(runs, agg.cpu, agg.nvml)
    gap = speedup_gap.gap_data(runs, agg.epochs, agg.steps) if gap is None else gap
    speed = tables.speed_data(runs) if speed is None else speed
    data = {"speedup": scaling, **(data or {})}
    drawn = {k: data.get(k, points) for k in ("runtime_vs_devices", "breakdown", "throughput", *FULL_GRIDS.values())}
    return {
        "summary": (lambda: plots.framework_ratios(speed),
                    "One framework's steady-state epoch time over the other's per configuration, with its 95% "
                    "interval; the line at 1× is parity, a coloured point's interval excludes it."),
        "status_map": (lambda: plots.status_map(runs),
                       "Outcome of every configuration, including fault-injection demonstrations; the "
                       "colour is the worst outcome over repeats."),
        "runtime_vs_devices": (lambda: plots.runtime_vs_devices(drawn["runtime_vs_devices"]),
                               "Training time (slowest rank) against devices, one panel per model and batch "
                               "size, like the seed study's Figure 1. An X marks a configuration without an ok run."),
        "runtime_vs_devices_all": (lambda: plots.runtime_vs_devices(drawn["runtime_vs_devices_all"]),
                                   "The same for every experiment of the sweep (one row per experiment and model)."),
        "speedup": (lambda: plots.speedup_vs_devices(data["speedup"]),
                    "Speed-up over the fewest devices; the dashed line is ideal linear scaling."),
        "speedup_gap": (lambda: plots.gap_bars(gap),
                        "Per multi-device point: the ideal epoch time (the fewest devices' epoch time / N) and "
                        "the measured gap to it split into extra steps, loader wait, compute contention, gradient "
                        "all-reduce and waiting, and the unexplained rest; parts that gave time back run "
                        "leftwards in the hatched strip, which ends at the measured epoch time."),
        "breakdown": (lambda: plots.breakdown_bars(drawn["breakdown"]),
                      "Mean time per training step split into phases (backward includes the all-reduce)."),
        "breakdown_all": (lambda: plots.breakdown_bars(drawn["breakdown_all"]),
                          "The same for every experiment of the sweep."),
        "throughput": (lambda: plots.throughput_vs_batch(drawn["throughput"]),
                       "Training seed nodes per second (all processes) against the per-process batch size."),
        "projection": (lambda: plots.projection_bands(*project.of_experiment(projection, experiment)),
                       "Speed-up over 1 device against devices, per model at each framework's median configuration: "
                       "the measured points, the model's projection with its 95% band, and each measured "
                       "multi-device point as the model predicts it without its own runs (out of sample). Past "
                       "the shaded line the host runs more processes than it has cores."),
        "resources": (lambda: plots.resources_over_time(runs, agg.cpu, agg.nvml, selected),
                      "CPU use (100% = one core) and resident memory of each rank (solid) and its loader "
                      "workers (dashed, summed) for selected runs: per framework its largest ok "
                      "configuration, then failed runs." + (" GPU utilisation from NVML." if not agg.nvml.empty else "")),
    }


def _having(df: pd.DataFrame, keys: list, ok: pd.DataFrame) -> pd.DataFrame:
    """The rows of `df` whose `keys` occur in `ok`."""
    if df.empty or ok.empty:
        return df.iloc[0:0]
    keep = set(ok[keys].itertuples(index=False, name=None))
    return df[[k in keep for k in df[keys].itertuples(index=False, name=None)]]


def comparable(points: pd.DataFrame, keys=("experiment", "model", "batch_size"), axis=None) -> pd.DataFrame:
    """Grid points of the figure panels (`keys`) that compare something: two or more ok points,
    or with `axis`, two or more ok values of it. A one-point panel, or one of failures only, is
    left out (the failures have the deadlock section)."""
    ok = points[points["n_ok"] > 0] if len(points) else points
    keys = list(keys)
    n = ok.groupby(keys)[axis].nunique() if axis else ok.groupby(keys).size() if len(ok) else pd.Series(dtype=int)
    return _having(points, keys, n[n >= 2].reset_index()[keys] if len(n) else ok.iloc[0:0])


def breakdown_points(points: pd.DataFrame) -> pd.DataFrame:
    """The points the breakdown figure draws: its comparable panels; where there are none (one
    point per model, as a one-GPU check has), every ok point with phase times, since a step's
    split into phases says something on its own."""
    timed = points.dropna(subset=["step_s_mean"]) if len(points) else points
    drawn = comparable(timed)
    return drawn if len(drawn) or timed.empty else timed[timed["n_ok"] > 0]


def measured_series(scaling: pd.DataFrame) -> pd.DataFrame:
    """The scaling series with a speed-up beyond their base (a series of a baseline alone compares nothing)."""
    series = list(speedup_gap.SERIES)
    multi = scaling[(scaling["devices"] > scaling["base_devices"]) & scaling["speedup"].notna()] \
        if len(scaling) else scaling
    return _having(scaling, series, multi)


def not_drawn(runs: pd.DataFrame, figure_data: dict, gap: pd.DataFrame) -> dict:
    """name -> why the page leaves a figure out (nothing to compare in it); the PNG asset is
    written all the same. `figure_data`: the frames the figures draw (comparable panels only)."""
    reasons = {
        "runtime_vs_devices": "Not drawn: no model and batch size has two ok points to compare.",
        "speedup": "Not drawn: no configuration has ok runs at two device counts.",
        "breakdown": "Not drawn: fewer than two ok points with phase times in any panel.",
        "throughput": "Not drawn: one batch size per configuration, so there is no curve.",
    }
    out = {name: why for name, why in reasons.items() if figure_data[name].empty}
    for main, full in FULL_GRIDS.items():
        if figure_data[full].empty:
            out[full] = reasons[main]
        elif figure_data[full]["experiment"].nunique() < 2:
            out[full] = "Not drawn again: the sweep has one experiment, shown above."
    if gap.empty or not gap["reason"].isna().any():
        out["speedup_gap"] = "Not drawn: no multi-device point could be split (the table says why)."
    if len(runs) and (runs["status"] == "ok").all():
        out["status_map"] = f"Not drawn: all {len(runs)} runs ended ok."
    return out


def _figures(agg, runs, points, scaling, gap, speed, assets: Path, experiment=None, projection=None) -> dict:
    """Write every figure's PNG; name -> {src, caption, file, why} (why: the line the page shows
    instead of a figure with nothing to compare, or None). `experiment`: the one the answers
    speak for, whose panels the sections show (None: all)."""
    main = points if experiment is None or not len(points) else points[points["experiment"] == experiment]
    data = {"runtime_vs_devices": comparable(main), "runtime_vs_devices_all": comparable(points),
            "speedup": measured_series(scaling), "breakdown": breakdown_points(main),
            "breakdown_all": breakdown_points(points),
            "throughput": comparable(points, ("experiment", "framework", "model", "devices", "workers"), "batch_size")}
    skip = not_drawn(runs, data, gap)
    figures = {}
    for name, (factory, caption) in build_figures(agg, runs, points, scaling, gap, speed, data, projection,
                                                  experiment).items():
        fig = factory()
        path = assets / f"{name}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plots.plt.close(fig)
        note = getattr(fig, "gnnscale_note", None)  # an empty figure: say why in words instead
        why = skip.get(name) or (f"Not drawn: {note}" if note else None)
        figures[name] = {"src": None if why else png_data_uri(path), "caption": caption, "file": path.name,
                         "why": why}
    return figures


def render(agg: Aggregate, out: Path, assets: Path, source: str = "", collectives=None) -> Path:
    """Write every asset and the self-contained page; return the page's path. `collectives`: the
    all-reduce micro-benchmark's JSON (or its fit) for the projection; None: the model's fallback."""
    out, assets = Path(out), Path(assets)
    out.parent.mkdir(parents=True, exist_ok=True)
    assets.mkdir(parents=True, exist_ok=True)
    runs = add_experiment(agg.runs)
    points = performance_points(runs)
    scaling = tables.scaling_data(points, runs)
    # from the frames in memory: the report reads the aggregate it was given, nothing else
    proj = project.project(runs, agg.epochs, agg.steps, project.REPORT_DEVICES, collectives)
    tabs = build_tables(agg, runs, proj)
    for t in tabs.values():
        t.write(assets)
    gap, speed = tabs["speedup_gap"].data, tabs["speed"].data
    args = (runs, points, speed, scaling, gap, tabs["workers"].data, tabs["batch"].data, agg.failures)
    precision = (agg.plan or {}).get("precision") or answers.DEFAULT_PRECISION
    top = answers.with_graphs(answers.all_answers(*args, tabs["loaders"].data, precision=precision, projection=proj),
                              *args, agg.datasets, projection=proj)
    main_speed = speed[speed["experiment"] == top["experiment"]] if len(speed) else speed
    figures = _figures(agg, runs, points, scaling, gap, main_speed, assets, top["experiment"], proj)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("report.html.j2").render(
        generated=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        source=source, counts=Counter(runs["status"]), n_runs=len(runs), n_invalid=len(agg.invalid),
        status_colours=STATUS_COLOURS, top=top, answer={a.key: a for a in top["answers"]},
        findings=all_findings(runs, points, scaling, tabs["paper_comparison"].data, agg.invalid,
                              workers=tabs["workers"].data, batch=tabs["batch"].data, plan=tabs["plan"].data,
                              gap=gap),
        plan_findings=adaptive_findings(agg.plan) + precision_findings(performance_runs(runs), tabs["plan"].data),
        lane_findings=lanes.lanes_findings(tabs["lanes"].data),
        loader_findings=loaders.loaders_findings(tabs["loaders"].data),
        study_findings=study_findings(tabs["study_work"].data, tabs["study_time"].data, tables.load_paper(),
                                      performance_runs(runs)),
        tables={k: {"title": t.title, "description": t.description, "html": t.html(), "empty": not t.grids
                    and t.body is None} for k, t in tabs.items()},
        figures=figures, n_failures=len(agg.failures),
        projection=project.page_notes(proj, answers.timing_only(performance_runs(runs)), top["experiment"]),
        experiments=list(dict.fromkeys(runs["experiment"])),
        excluded_faults=int(len(runs) - len(performance_runs(runs))),
    )
    out.write_text(page)
    return out


def main(argv=None) -> int:
    """Command line: render the report of an aggregate directory."""
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n")[0])
    p.add_argument("--aggregate", required=True, help="directory written by analysis.aggregate")
    p.add_argument("--out", required=True, help="the HTML page to write (e.g. results/report/index.html)")
    p.add_argument("--assets", default=None, help="directory for table CSV/HTML and plot PNG files "
                   "(default: the page's directory)")
    args = p.parse_args(argv)
    agg_dir = Path(args.aggregate)
    if not (agg_dir / "runs.csv").exists():
        p.error(f"--aggregate {agg_dir}: no runs.csv there; run `python -m analysis.aggregate --out-dir "
                f"{agg_dir} RUN_DIR...` first")
    out = Path(args.out)
    # the all-reduce micro-benchmark where it writes by default, beside the aggregate, if there is one
    page = render(Aggregate.load(agg_dir), out, Path(args.assets) if args.assets else out.parent, source=str(agg_dir),
                  collectives=project.default_collectives(agg_dir))
    print(f"[analysis] report: {page} ({page.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
