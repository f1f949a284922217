"""Runs grouped for the tables: each run labelled with its experiment, the performance runs
picked out, and one row per experiment and grid point with the mean and 95% interval of every
value over its repeats, in the seed study's order.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pandas as pd

from analysis import EXPERIMENT_KEYS, FRAMEWORK_ORDER, GRID_KEYS, MODEL_KEYS, MODEL_ORDER, PHASE_COLUMNS, model_label
from analysis.formatting import status_text, worst_status
from analysis.stats import mean_ci


def _key_text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "none"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _in_experiment_order(runs: pd.DataFrame) -> pd.DataFrame:
    """Performance experiments first, fault-injection demonstrations last (runs keep their order within each)."""
    order = sorted(set(runs["experiment"]), key=lambda x: ("fault injection" in x, x))
    runs["experiment"] = pd.Categorical(runs["experiment"], categories=order, ordered=True)
    return runs.sort_values("experiment", kind="stable").assign(experiment=lambda d: d["experiment"].astype(str))


def _epochs_text(t: pd.Series, texts: pd.DataFrame, models: pd.Series, per_model_epochs: bool) -> str:
    """The label's epochs: each model's where they are set per model, 'at most' for timing runs."""
    if per_model_epochs:
        same = texts[(texts["dataset"] == t["dataset"]) & (texts["device_type"] == t["device_type"])]
        by_model = same.groupby(models.loc[same.index])["epochs"].first()
        return "epochs " + ", ".join(f"{model_label(m)} {e}" for m, e in sorted(
            by_model.items(), key=lambda x: MODEL_ORDER.index(x[0]) if x[0] in MODEL_ORDER else 99))
    if t.get("until") == "precise":
        return f"at most {t['epochs']} epochs"
    return f"{t['epochs']} epochs"


def _experiment_label(t: pd.Series, varying: list, epochs: str, split: bool) -> str:
    """One run's experiment: dataset, device type, epochs, its kind of run, and the settings that vary."""
    parts = [f"dataset {t['dataset']}", t["device_type"], epochs]
    if t.get("until") == "precise":
        parts.append(f"timing runs: until the epoch time is known to ±{float(t['precision']) * 100:.0f}%")
    elif split:
        parts.append("fixed schedule" + (", the seed study's harness" if t.get("harness") == "study" else ""))
    if t.get("inject", "none") != "none":
        parts.append(f"fault injection: {t['inject']}")
    for k in varying:
        if k in ("dataset", "device_type", "epochs", "inject", "until", "precision"):
            continue
        if t[k] in ("True", "False"):  # a switch reads as its name when on, nothing when off
            parts += [k.replace("_", " ")] if t[k] == "True" else []
        else:
            parts.append(f"{k}={t[k]}")
    return " · ".join(parts)


def add_experiment(runs: pd.DataFrame, split: bool = False) -> pd.DataFrame:
    """Label every run with its experiment: the settings outside the swept grid axes.

    The label always names dataset, device type and epochs, plus any other setting that
    differs between experiments, so two tables are never silently mixed."""
    runs = runs.copy()
    keys = [k for k in EXPERIMENT_KEYS if k in runs.columns]
    if runs.empty:
        runs["experiment"] = pd.Series(dtype="object")
        return runs
    kinds = [runs[k].fillna(d) for k, d in (("until", "epochs"), ("harness", "fair")) if k in runs]
    if not split and kinds and pd.concat(kinds, axis=1).drop_duplicates().shape[0] > 1:
        # Timing runs (epochs = a cap), fixed-schedule runs (epochs = the schedule, maybe per
        # model) and study-harness runs are labelled apart, so a per-model schedule stays one
        # experiment.
        return _in_experiment_order(pd.concat([add_experiment(g, split=True)
                                               for _, g in runs.groupby(kinds, sort=False)]))
    texts = runs[keys].map(_key_text)
    varying = [k for k in keys if (texts.groupby(runs["model"])[k].nunique().max()
                                   if k in MODEL_KEYS else texts[k].nunique()) > 1]
    # Epochs may be set per model (a model that needs more steps to learn); then the label
    # names each model's epochs, so both models stay in one experiment.
    per_model_epochs = "epochs" not in varying and texts["epochs"].nunique() > 1
    runs["experiment"] = [_experiment_label(t, varying, _epochs_text(t, texts, runs["model"], per_model_epochs), split)
                          for _, t in texts.iterrows()]
    return _in_experiment_order(runs)


def performance_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs that measure performance: fault-injection demonstrations are left out."""
    if "inject" not in runs.columns:
        return runs
    return runs[runs["inject"].isna() | (runs["inject"].astype(str).isin(["", "None", "none"]))]


CARRIED = ("dataset", "epochs", "device_type", "harness", "processes", "oversubscribed", "until")


def adapter_choice(runs: pd.DataFrame, key: str) -> pd.Series:
    """One entry of each run's adapter choices (runs.csv's adapter_choices, the JSON its adapter
    recorded: its sampler, how its layers compute, ...); None where the run recorded none."""
    if "adapter_choices" not in runs:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)

    def get(text):
        try:
            return json.loads(text).get(key)
        except (TypeError, ValueError, AttributeError):
            return None
    return runs["adapter_choices"].map(get)


def truthy(v):
    """True/False from a bool or its CSV text; None when unknown."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, str):
        return {"true": True, "false": False}.get(v.strip().lower())
    return bool(v)


def grid_points(runs: pd.DataFrame, values) -> pd.DataFrame:
    """One row per experiment and grid point: counts, statuses, mean and CI of each value."""
    cols = ["experiment", *GRID_KEYS]
    rows = []
    if runs.empty:
        return pd.DataFrame(columns=cols + list(CARRIED) + ["n_runs", "n_ok", "statuses", "worst_status", "run_ids",
                                            "command", "n_converged", "n_not_converged", "n_reached_target", "n_capped"]
                            + [f"{v}_{s}" for v in values for s in ("mean", "ci95", "n")])
    for key, g in runs.groupby(cols, sort=False, dropna=False):
        ok = g[g["status"] == "ok"]
        statuses = Counter(g["status"])
        row = dict(zip(cols, key))
        # Constant within an experiment; carried along for tables that need them.
        row.update({k: g[k].iloc[0] for k in CARRIED if k in g})
        row.update({"n_runs": len(g), "n_ok": len(ok), "statuses": status_text(statuses),
                    "worst_status": worst_status(statuses),
                    "run_ids": " ".join(g["run_id"]), "command": g.sort_values("repeat")["command"].iloc[0]})
        conv = ok["converged"].map(truthy) if "converged" in ok else pd.Series(dtype=object)
        row.update({"n_converged": int((conv == True).sum()),  # noqa: E712 (None stays unknown)
                    "n_not_converged": int((conv == False).sum()),  # noqa: E712
                    "n_reached_target": int(ok["time_to_target_s"].notna().sum()) if "time_to_target_s" in ok else 0,
                    "n_capped": int(ok["stopped_by_cap"].map(truthy).fillna(False).sum())
                    if "stopped_by_cap" in ok else 0})
        for v in values:
            m, ci = mean_ci(ok[v]) if v in ok else (float("nan"), float("nan"))
            row.update({f"{v}_mean": m, f"{v}_ci95": ci, f"{v}_n": int(ok[v].notna().sum()) if v in ok else 0})
        rows.append(row)
    return pd.DataFrame(rows)


def paper_order(df: pd.DataFrame, keys) -> pd.DataFrame:
    """Paper order: GraphSAGE before GAT, PyG before DGL, numbers ascending."""
    order = {"model": MODEL_ORDER, "framework": FRAMEWORK_ORDER}
    def keyfunc(col):
        if col.name in order:
            return col.map(lambda x: order[col.name].index(x) if x in order[col.name] else 99)
        return col
    return df.sort_values(list(keys), key=keyfunc, kind="stable")


POINT_VALUES = ("train_time_s", "median_epoch_time_s", "throughput_seed_nodes_per_s", "steady_seed_nodes_per_s",
                "epochs_run", "precision_reached",
                "sampled_edges_per_s", "final_val_acc", "startup_s", "step_s",
                "steady_epoch_time_s", "steady_epoch_cv", "warmup_epoch_time_s", "steps_per_epoch",
                "timed_to_startup_ratio", "baseline_val_acc", "target_val_acc", "time_to_target_s",
                "epochs_to_target") + tuple(f"step_{p}" for p in PHASE_COLUMNS)


def performance_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Grid-point statistics of the performance runs (runs must carry `experiment`)."""
    return grid_points(performance_runs(runs), POINT_VALUES)
