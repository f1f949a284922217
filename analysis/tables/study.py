"""Why the seed study saw what it saw: its harness beside the fair one, the work each rank did
per epoch and the epoch time against devices.
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.display import Cell, GridTable, TableSet, index_cells
from analysis.formatting import fmt_num
from analysis.grouping import paper_order, performance_runs

HARNESS_ORDER = ("study", "fair")
HARNESS_LABELS = {"study": "seed study's harness", "fair": "fair harness"}
# A study-vs-fair comparison pairs runs that differ only in the harness.
# Not epochs: the study harness trains a fixed schedule, the fair harness's timing runs stop when
# their epoch time is known; both are compared per epoch.
STUDY_KEYS = ("dataset", "device_type", "framework", "model", "batch_size", "workers")
WORK_VALUES = ("steps_per_epoch", "seed_nodes_per_rank_epoch", "seed_nodes_per_epoch_all_ranks",
               "train_split_seed_nodes", "split_passes_per_epoch")


def _with_harness(runs: pd.DataFrame) -> pd.DataFrame:
    runs = performance_runs(runs)
    if "harness" not in runs.columns:
        runs = runs.assign(harness="fair")
    return runs.assign(harness=runs["harness"].fillna("fair").astype(str))


def has_study_runs(runs: pd.DataFrame) -> bool:
    """Whether any performance run used the seed study's harness."""
    return not runs.empty and (_with_harness(runs)["harness"] == "study").any()


def study_work_data(runs: pd.DataFrame) -> pd.DataFrame:
    """Work per rank per epoch for every harness x grid point (ok runs, mean over repeats)."""
    cols = ["harness", *STUDY_KEYS, "devices", "n_ok", *WORK_VALUES]
    runs = _with_harness(runs)
    ok = runs[runs["status"] == "ok"]
    if ok.empty or not has_study_runs(runs):
        return pd.DataFrame(columns=cols)
    keys = ["harness", *STUDY_KEYS, "devices"]
    vals = ok[list(WORK_VALUES)].apply(pd.to_numeric, errors="coerce")
    g = pd.concat([ok[keys], vals], axis=1).groupby(keys, sort=False, dropna=False)
    out = g.mean().reset_index().merge(g.size().rename("n_ok").reset_index(), on=keys)
    return paper_order(out, ["harness", "model", "framework", "batch_size", "workers", "devices"])[cols]


def study_time_data(points: pd.DataFrame) -> pd.DataFrame:
    """Steady-state epoch time against devices per harness (training batches only, so the two
    harnesses are comparable), with the speed-up over the fewest devices of the same harness and
    configuration; each harness's own training time in the CSV."""
    cols = ["harness", *STUDY_KEYS, "devices", "base_devices", "n_ok", "statuses", "epoch_time_s", "epoch_time_ci95",
            "speedup", "train_time_s", "train_time_ci95", "command"]
    if points.empty or "harness" not in points or not (points["harness"] == "study").any():
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in points.groupby(["harness", *STUDY_KEYS], sort=False, dropna=False):
        g = g.sort_values("devices")
        base = g.iloc[0]
        for p in g.itertuples():
            ok = p.n_ok > 0 and base.n_ok > 0
            rows.append({**dict(zip(["harness", *STUDY_KEYS], key)), "devices": p.devices,
                         "base_devices": base.devices, "n_ok": p.n_ok, "statuses": p.statuses,
                         "epoch_time_s": p.steady_epoch_time_s_mean, "epoch_time_ci95": p.steady_epoch_time_s_ci95,
                         "speedup": (base.steady_epoch_time_s_mean / p.steady_epoch_time_s_mean
                                     if ok else float("nan")),
                         "train_time_s": p.train_time_s_mean, "train_time_ci95": p.train_time_s_ci95,
                         "command": p.command})
    out = pd.DataFrame(rows, columns=cols)
    return paper_order(out, ["model", "framework", "batch_size", "workers", "harness", "devices"])


def _study_grids(data: pd.DataFrame, caption: str, cell) -> list:
    """Rows model x framework x batch x workers; columns harness x devices; `cell(row)` -> Cell."""
    if data.empty:
        return []
    harnesses = [h for h in HARNESS_ORDER if h in set(data["harness"])]
    devices = sorted(data["devices"].unique())
    header = [[("Model", 1), ("Framework", 1), ("Batch size", 1), ("Workers", 1)]
              + [(HARNESS_LABELS.get(h, h), len(devices)) for h in harnesses],
              [("", 1)] * 4 + [(f"{d} device{'s' if d != 1 else ''}", 1) for _ in harnesses for d in devices]]
    rows, prev = [], None
    grids = []
    for setting, exp in data.groupby(["dataset", "device_type"], sort=False):
        idx = {(r["model"], r["framework"], r["batch_size"], r["workers"], r["harness"], r["devices"]): r
               for r in exp.to_dict("records")}
        keys = paper_order(exp[["model", "framework", "batch_size", "workers"]].drop_duplicates(),
                           ["model", "framework", "batch_size", "workers"])
        rows, prev = [], None
        for k in keys.itertuples(index=False):
            labels = [model_label(k.model), framework_label(k.framework), str(k.batch_size), str(k.workers)]
            cells = index_cells(labels, prev)
            prev = labels
            for h in harnesses:
                for d in devices:
                    r = idx.get((k.model, k.framework, k.batch_size, k.workers, h, d))
                    cells.append(Cell("—", css="missing", title="not in the grid") if r is None else cell(r))
            rows.append(cells)
        title = f"{caption} · dataset {setting[0]} · {setting[1]}"
        grids.append(GridTable(title, header, rows, n_index=4))
    return grids


def study_work_table(runs: pd.DataFrame) -> TableSet:
    """Work per rank per epoch, study harness beside the fair harness."""
    data = study_work_data(runs)

    def cell(r):
        if not r["n_ok"]:
            return Cell("no ok run", css="muted")
        passes = r["split_passes_per_epoch"]
        text = (f"{fmt_num(r['seed_nodes_per_rank_epoch'])} seeds · {r['steps_per_epoch']:.0f} steps"
                + ("" if pd.isna(passes) else f" · all ranks {passes:.2f}× split"))
        return Cell(text, css="warn" if not pd.isna(passes) and passes > 1.05 else "",
                    title=f"all ranks: {fmt_num(r['seed_nodes_per_epoch_all_ranks'])} seed nodes per epoch; "
                          f"training split: {fmt_num(r['train_split_seed_nodes'])}")
    return TableSet(
        "study_work", "Work per rank: seed study's harness vs fair harness",
        "Seed nodes and steps ONE rank trained per epoch (from each rank's epochs.csv), and all ranks' "
        "seed nodes per epoch as a multiple of the training split (1.00× = the ranks shared one pass over "
        "the split; N× = every one of N ranks trained the whole split). Highlighted: more than one pass.",
        data, _study_grids(data, "Work per rank per epoch", cell),
        empty_text="No run with the seed study's harness (--harness study) in these results; "
                   "run `.venv/bin/snakemake --cores all --profile profiles/default --configfile config/study.yaml`.")


def study_time_table(points: pd.DataFrame) -> TableSet:
    """Training time against devices and speed-up, study harness beside the fair harness."""
    data = study_time_data(points)

    def cell(r):
        if not r["n_ok"]:
            return Cell(r["statuses"], css="status", title=f"rerun: {r['command']}")
        if pd.isna(r["epoch_time_s"]):
            return Cell("n/a", css="muted", title="no epoch after the warm-up epoch")
        ci = "" if pd.isna(r["epoch_time_ci95"]) else f" ± {fmt_num(r['epoch_time_ci95'], ref=r['epoch_time_s'])}"
        sp = "" if r["devices"] == r["base_devices"] or pd.isna(r["speedup"]) else f" ({r['speedup']:.2f}×)"
        return Cell(f"{fmt_num(r['epoch_time_s'])}{ci} s{sp}",
                    css="warn" if not pd.isna(r["speedup"]) and r["speedup"] < 1 else "",
                    title=f"training time {fmt_num(r['train_time_s'])} s; rerun: {r['command']}")
    return TableSet(
        "study_time", "Time vs devices: seed study's harness vs fair harness",
        "Steady-state epoch time of the slowest rank (training batches only, after the warm-up epoch; mean ± "
        "95% CI over repeats) and in brackets the speed-up over the fewest devices of the same harness "
        "(below 1×, highlighted: slower with more devices). The CSV also has each harness's own training "
        "time: the study's is the wall time of trainer.fit, validation and Lightning's set-up included, as "
        "the seed study timed it; the fair harness's is the sum of its epochs (their number set by the stop rule).",
        data, _study_grids(data, "Steady-state epoch time (speed-up)", cell),
        empty_text="No run with the seed study's harness (--harness study) in these results.")
