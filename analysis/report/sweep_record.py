"""The report's record of the sweep itself, beside the questions: what the runs ran on
(environment), what each framework was given (fairness), every run with the commands that rerun
it, the malformed results, the deadlock report, the plan for the next sweep and the second round,
and the memory model against the measured peak.
"""

from __future__ import annotations

import functools
from collections import Counter

import pandas as pd

from analysis import FRAMEWORK_ORDER, framework_label, model_label
from analysis.report import deadlocks, fidelity
from analysis.repeats import next_sweep
from analysis.display import TableSet, frame_table, row_anchor
from analysis.formatting import fmt_bytes, fmt_duration, fmt_pct
from analysis.grouping import adapter_choice, paper_order, truthy
from analysis.tables.memory import memory_model_table
from runners.adapters import registry


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



LOOP_MODELS = [m for m in registry.MODELS.values() if m.self_loops]  # models --no-self-loops changes

FAIRNESS_ROWS = (
    ("fan-outs as given (hop nearest the seeds first)", lambda r: r["fanouts"]),
    ("fan-outs as passed to the framework's sampler", lambda r: r["fanouts_framework"]),
    ("loader (--loader)", lambda r: r["loader"]),
    ("each loader's sampling: replacement, self-loops",
     lambda r: r["loader"] + ": " + r["replace"].map(lambda v: "with" if truthy(v) else "without")
     + " replacement; self-loops: " + adapter_choice(r, "self_loops").fillna("none")),
    ("sampler", lambda r: adapter_choice(r, "sampler")),
    ("PyG sampler backend (recorded per run)", lambda r: r["env_pyg_sampler_backend"].where(r["framework"] == "pyg")),
    (f"self-loops ({', '.join(m.label for m in LOOP_MODELS)})",
     lambda r: r["self_loops"].where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("self-loop implementation", lambda r: adapter_choice(r, "self_loops").where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("sampling with replacement", lambda r: r["replace"]),
    ("PyG layer trimming", lambda r: r["pyg_trim"].where(r["framework"] == "pyg")),
    ("model layer (per model)", lambda r: adapter_choice(r, "layer")),
    ("layer computation", lambda r: adapter_choice(r, "layer_compute")),
    ("training harness (fair: the suite's DDP loop; study: the seed study's Lightning harness)",
     lambda r: r["harness"] if "harness" in r else None),
    ("seed split across ranks", lambda r: adapter_choice(r, "seed_split")),
    ("uneven batches (naive split)", lambda r: r["uneven_batches"]),
    ("graph input", lambda r: adapter_choice(r, "graph_input")),
    ("where node features are gathered", lambda r: adapter_choice(r, "feature_gather")),
    ("batch preparation (timed as its own phase)", lambda r: adapter_choice(r, "batch_prepare")),
    ("what a sampled-edge count counts", lambda r: adapter_choice(r, "sampled_edges")),
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
    """Setting -> values per framework, so differences between the frameworks are visible; and how
    close the runner's loop is to each framework's example loop (analysis.report.fidelity)."""
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
    rows += fidelity.fidelity_rows(fws) if fws else []
    return pd.DataFrame(rows, columns=["setting"] + [framework_label(f) for f in fws])


STOP_TEXT = {"precise": "precise", "schedule": "schedule", "epoch_cap": "CAP: epochs", "time_cap": "CAP: seconds"}


def _stop_text(r) -> str | None:
    """Why a run stopped; a cap (the epoch time not yet precise) is flagged, with drift if seen."""
    text = STOP_TEXT.get(r.get("stopped_by")) if isinstance(r.get("stopped_by"), str) else None
    if text and text.startswith("CAP") and truthy(r.get("drifting")):
        text += " (drifting)"
    return text


def plan_frame(plan: pd.DataFrame) -> pd.DataFrame:
    """The plan (analysis.repeats.next_sweep) with readable columns and times in ms/s/min."""
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


def _main_noise(plan: dict) -> str:
    """The main experiment's launch noise the plan projected with: one SD, or one per part where the
    report's Bartlett split parted it ("default (model gat)"); a plan from before the parts gives its pooled SD."""
    parts = {k: v for k, v in (plan.get("noise") or {}).items() if k == "default" or k.startswith("default (")}
    if len(parts) <= 1:
        sd, dof = next(((v["log_sd"], v["dof"]) for v in parts.values()), (plan["pooled_log_sd"], plan["pooled_dof"]))
        return f"SD {sd:.3f} on {dof} dof"
    return "SD " + ", ".join(f"{v['log_sd']:.3f} ({k[len('default ('):-1]}, {v['dof']} dof)" for k, v in parts.items())


def adaptive_findings(plan: dict) -> list:
    """What the second round did and why; how many comparisons are settled on their own, and
    what the open ones would cost."""
    if not plan or "answers" not in plan:
        return []
    answers = [a for a in plan["answers"] if a.get("first_screen", True)]
    comps = plan["comparisons"]
    wide = [a for a in answers if a["measured_half_width"] > plan["precision"]]
    added = sum(p["added"] for p in plan["points"])
    left = [a for a in answers if a["projected_half_width"] > plan["precision"]]
    text = (f"Second round: {len(wide)} of {len(answers)} answers were wider than ±{100 * plan['precision']:g}% "
            f"after {plan['first_round']} repeats (launch noise {_main_noise(plan)}), so {added} more runs went "
            f"to {len(plan['points'])} points, a whole repeat "
            f"block of an answer at a time "
            f"(about {plan['planned_s'] / 60:.1f} of a {plan['budget_s'] / 60:g} min budget, at most "
            f"{plan['max_repeats']} runs a point).")
    if plan.get("aim"):
        text += (f" Each answer is aimed at ±{100 * plan['aim']:.3g}%, inside the ±{100 * plan['precision']:g}%, since the "
                 "round's own runs move the noise estimate the page judges it on.")
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


# -- the tables, as analysis.REPORT_TABLES names them -------------------------------------------

def memory_table(runs: pd.DataFrame) -> TableSet | None:
    """The pre-flight memory model against the measured peak; None when no run has a model."""
    memory = memory_model_table(runs)
    if memory.empty:
        return None
    table = frame_table(
        memory_frame(memory), "memory_model", "Memory model vs measured peak",
        "Per configuration: the pre-flight model of peak host memory (runners/memory/model.py: ranks, "
        "loader workers, batches in flight, dataset copies; a partitioned host's partition and graph server), "
        "the highest measured peak of the same processes (PSS of ranks and workers at the worst sample; "
        "for a partitioned run node 0's graph server and trainers sampled together, against their model "
        "without the torchrun agent), the memory cgroup's own peak and which processes the "
        "out-of-memory killer took when the run had a --memory-limit (docs/memory.md).",
        )
    table.data = memory  # the CSV keeps the bytes
    return table


def plan_table(plan: pd.DataFrame) -> TableSet:
    """The plan for the next sweep (next_sweep.plan_data): readable on the page, raw in the CSV."""
    table = frame_table(
        plan_frame(plan), "plan", "Plan the next sweep",
        "Per timing configuration: the noise within a run (CV of the steady epochs) and between launches "
        "(CV of the run means beyond what the within-run noise explains), the cost of a launch (start-up, "
        "warm-up, validation) and of an epoch, the precision the repeats reached now (95% CI of the mean "
        f"epoch time over repeats, relative), and the cheapest plan for ±{100 * next_sweep.PLAN_PRECISION:.0f}%: "
        "epochs per run "
        "sqrt(launch cost × within variance / (epoch cost × between variance)) within the caps, and the repeats "
        "that then reach it (Kalibera & Jones, ISMM 2013; analysis/repeats/next_sweep.py).",
        empty_text="No timing run with the stop rule (--until precise) has finished ok.", group_col="experiment",
        row_id=lambda r: row_anchor("plan", r["experiment"], r["framework"], r["model"], r["devices"], r["batch"],
                                    r["workers"]))
    table.data = plan  # the CSV keeps the raw numbers
    return table


def adaptive_table(plan: dict) -> TableSet:
    """The second round (the aggregate's adaptive plan): one row per first-screen answer."""
    table = frame_table(
        adaptive_frame(plan), "adaptive", "Second round: repeats where an answer was open",
        "Every first-screen answer (analysis/repeats/second_round.py: the geometric mean of its comparisons over the "
        "configurations): the 95% interval's half-width after the first round, the repeats the second round "
        "added to its points, and the half-width those are projected to give, at the launch noise pooled over "
        "the first round. Repeats go only where the interval was wider than the precision asked for (config "
        "`adaptive`), within its time budget; where the interval lies plays no part. The CSV lists every "
        "comparison per configuration, whether it is settled on its own, and what settling it would cost.",
        empty_text="No second round: config `adaptive` is off, or the first round left nothing to plan.")
    table.data = adaptive_comparisons(plan)
    return table


def deadlocks_table(failures: list) -> TableSet:
    """Every run that did not end ok, with its diagnosis (analysis.report.deadlocks)."""
    return TableSet(
        "deadlocks", "Deadlock and failure report", "Every run that did not end ok.",
        deadlocks.failures_frame(failures), body=deadlocks.render_html(failures))


def environment_table(runs: pd.DataFrame) -> TableSet:
    """What the runs ran on."""
    return frame_table(environment_frame(runs), "environment", "Environment",
                       "What the runs ran on (distinct values; counts when they differ).")


def fairness_table(runs: pd.DataFrame) -> TableSet:
    """What each framework was given."""
    return frame_table(fairness_frame(runs), "fairness", "Fairness settings",
                       "What each framework was given; a value that differs between the "
                       "columns is a deliberate, recorded framework difference. The last rows: the "
                       "runner's epoch time over a minimal loop written after each framework's own "
                       "multi-GPU example on the same graph and settings, and the first screen's gap as "
                       "the runner measures it over the same gap between those loops (1 = the runner "
                       "adds nothing; PASS: the 95% interval within the 1.03 target, MISS: all of it past it, "
                       "UNSETTLED: the interval spans it), with where and when they were measured.")


def runs_table(runs: pd.DataFrame) -> TableSet:
    """Every valid run with the commands that rerun it."""
    return frame_table(runs_frame(runs), "runs", "All runs",
                       "Every valid run with the commands that rerun it from the project directory: "
                       "through the workflow (Snakemake redoes the point and then the report) or directly "
                       "(the run alone, with its lane's interpreter). A rerun never deletes a measured "
                       "run: the one it replaces moves to the point's previous/ (results/aggregate/"
                       "history.csv lists them).",
                       code_cols=("rerun through the workflow", "rerun directly"), status_col="status",
                       empty_text="No valid runs.", group_col="experiment")


def invalid_table(invalid: pd.DataFrame) -> TableSet:
    """The result files that could not be used, and why."""
    return frame_table(invalid.reindex(columns=["path", "run_id", "reason"]), "invalid",
                       "Malformed results", "Results that could not be used, and why.",
                       code_cols=("path",), empty_text="Every result file was valid.")
