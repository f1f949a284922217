"""The report's tables, built from grid points and runs: the seed study's Table 2 layout,
scaling with devices, the loader-worker and batch-size axes, step breakdown, throughput,
accuracy, our Table 2 beside the published one, the study harness against the fair one, and
the memory model against the measured peak. Every table is a `display.TableSet`: a tidy numeric
frame (written as CSV) and one display grid per experiment (written as an HTML fragment).
Repeats of one grid point are averaged with a 95% confidence interval (grouping.grid_points);
a grid point without an ok run shows its status.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from analysis import FRAMEWORK_ORDER, GRID_KEYS, PHASE_COLUMNS, PHASE_LABELS, framework_label, model_label
from analysis.comparisons import framework_comparison, framework_pairs
from analysis.display import Cell, GridTable, TableSet, index_cells, row_anchor, value_cell
from analysis.formatting import fmt_duration, fmt_num, fmt_pct, fmt_si, status_text
from analysis.grouping import paper_order, performance_points, performance_runs
from analysis.noise import caption as noise_caption
from analysis.noise import pooled_noise
from analysis.stats import CI_METHOD_RATIO, verdict

PAPER_CSV = Path(__file__).resolve().parent / "paper_table2.csv"
PAPER_EPOCHS = 50
PAPER_SETUP = "Reddit, 50 epochs, 1/2/4 NVIDIA T4 GPUs on a Google Cloud N1 machine"
PAPER_DATASET = "reddit"
EFFICIENCY_WARN = 0.5   # parallel efficiency below this: scaling has stopped paying off
SUPERLINEAR_WARN = 1.2  # above this the baseline was probably disturbed, not the scaling superb
ACCURACY_GAP_WARN = 0.02  # accuracy difference between frameworks worth flagging (2 points)
TIMED_TO_STARTUP_WARN = 5.0  # training time below 5x the start-up: the run is too short to mean much


# -- Table 2 layout -------------------------------------------------------------------------

def table2_grids(points: pd.DataFrame, value: str, fmt=fmt_num, scale=1.0, best=None,
                 gap_warn=None) -> list:
    """Seed study layout per experiment: rows model x devices x workers, columns batch size x
    framework. `best` ("min"/"max") bolds the better framework; `gap_warn` flags pairs whose
    difference exceeds it."""
    grids = []
    for exp, g in points.groupby("experiment", sort=False):
        batches = sorted(g["batch_size"].unique())
        fws = [f for f in FRAMEWORK_ORDER if f in set(g["framework"])] + sorted(set(g["framework"]) - set(FRAMEWORK_ORDER))
        header = [[("Model", 1), ("Devices", 1), ("Workers", 1)] + [(f"Batch size {b}", len(fws)) for b in batches],
                  [("", 1)] * 3 + [(framework_label(f), 1) for b in batches for f in fws]]
        idx = {(r.model, r.devices, r.workers, r.batch_size, r.framework): r for r in g.itertuples()}
        rows, prev = [], None
        row_keys = paper_order(g[["model", "devices", "workers"]].drop_duplicates(), ["model", "devices", "workers"])
        for rk in row_keys.itertuples(index=False):
            labels = [model_label(rk.model), str(rk.devices), str(rk.workers)]
            cells = index_cells(labels, prev)
            prev = labels
            for b in batches:
                pts = {f: idx.get((rk.model, rk.devices, rk.workers, b, f)) for f in fws}
                group = []
                for f in fws:
                    p = pts[f]
                    group.append(Cell("—", css="missing", title="not in the grid") if p is None
                                 else value_cell(p._asdict(), value, fmt, scale))
                means = {f: getattr(pts[f], f"{value}_mean") for f in fws
                         if pts[f] is not None and pts[f].n_ok > 0 and not pd.isna(getattr(pts[f], f"{value}_mean"))}
                if best and len(means) >= 2:
                    pick = (min if best == "min" else max)(means, key=means.get)
                    if list(means.values()).count(means[pick]) == 1:
                        group[fws.index(pick)].css += " best"
                if gap_warn is not None and len(means) >= 2 and max(means.values()) - min(means.values()) > gap_warn:
                    for f in means:
                        group[fws.index(f)].css += " warn"
                cells += group
            rows.append(cells)
        grids.append(GridTable(exp, header, rows, n_index=3))
    return grids


def training_time_table(points: pd.DataFrame) -> TableSet:
    """Steady-state epoch time in the seed study's Table 2 layout."""
    data = points[["experiment", *GRID_KEYS, "n_runs", "n_ok", "statuses", "steady_epoch_time_s_mean",
                   "steady_epoch_time_s_ci95", "train_time_s_mean", "command"]] if not points.empty else points
    return TableSet(
        "table2", "Epoch time (seed study's Table 2 layout)",
        "Slowest rank's steady-state epoch time (one pass over the training split, after the warm-up "
        "epoch), mean ± 95% CI over repeats: the seed study's total training time divided into what one epoch "
        "costs, since timing runs stop once that is known. Batch size is per process. The faster framework of "
        "each pair is bold; a cell without any ok run shows its status instead.",
        data, table2_grids(points, "steady_epoch_time_s", fmt=fmt_duration, best="min"))


def accuracy_table(points: pd.DataFrame) -> TableSet:
    """Accuracy per configuration: repeats, final accuracy with its interval, the features-only
    baseline, convergence and time to the dataset's target accuracy. Runs that stopped when their
    epoch time was known (--until precise) and study-harness runs are left out: accuracy is the
    convergence runs' question."""
    if "until" in points:
        points = points[points["until"].fillna("epochs") != "precise"]
    if "harness" in points:  # the study harness's short schedule is about time and work
        points = points[points["harness"].fillna("fair") != "study"]
    def acc(p):
        m, ci = p["final_val_acc_mean"], p["final_val_acc_ci95"]
        if pd.isna(m):
            return Cell("n/a")
        text = f"{100 * m:.1f}" + ("" if pd.isna(ci) else f" ± {100 * ci:.1f}")
        if p["n_not_converged"] and not p["n_converged"]:
            return Cell(f"{text} (not converged)", css="warn",
                        title="not above the features-only baseline: no accuracy comparison is possible")
        return Cell(text, css="warn" if p["n_not_converged"] else "")

    def conv(p):
        known = p["n_converged"] + p["n_not_converged"]
        if not known:
            return Cell("unknown", css="muted")
        text = "yes" if p["n_converged"] == known else ("not converged" if not p["n_converged"] else
                                                          f"{p['n_converged']} of {known}")
        return Cell(text, css="" if p["n_converged"] == known else "warn")

    def tta(p):
        m, ci = p["time_to_target_s_mean"], p["time_to_target_s_ci95"]
        if pd.isna(p["target_val_acc_mean"]):
            return Cell("no target", css="muted")
        if not p["n_reached_target"]:
            return Cell("not reached", css="warn")
        text = fmt_num(m) + ("" if pd.isna(ci) else f" ± {fmt_num(ci, ref=m)}")
        if p["n_reached_target"] < p["n_ok"]:
            text += f" ({p['n_reached_target']} of {p['n_ok']} reached it)"
        return Cell(text)

    columns = [("repeats (ok / run)", lambda p: Cell(f"{p['n_ok']} / {p['n_runs']}")),
               ("final val acc (%)", acc),
               ("features-only baseline (%)", lambda p: Cell(
                   "n/a" if pd.isna(p["baseline_val_acc_mean"]) else f"{100 * p['baseline_val_acc_mean']:.1f}")),
               ("converged", conv),
               ("target (%)", lambda p: Cell(
                   "—" if pd.isna(p["target_val_acc_mean"]) else f"{100 * p['target_val_acc_mean']:.0f}")),
               ("time to target (s)", tta),
               ("epochs to target", lambda p: Cell(f"{p['epochs_to_target_mean']:.3g}" if p["n_reached_target"]
                                                   else "—"))]
    keep = ["experiment", *GRID_KEYS, "n_runs", "n_ok", "n_converged", "n_not_converged", "n_reached_target",
            "final_val_acc_mean", "final_val_acc_ci95", "baseline_val_acc_mean", "target_val_acc_mean",
            "time_to_target_s_mean", "time_to_target_s_ci95", "epochs_to_target_mean"]
    return TableSet(
        "accuracy", "Validation accuracy and time to accuracy (fixed-schedule runs)",
        "Validation accuracy after the last epoch (%, mean ± 95% CI over repeats). A run converged when it beats "
        "the features-only baseline (logistic regression on the node features, same splits); a configuration "
        "whose runs do not is marked 'not converged' and its accuracy is not compared. Time to target: "
        "training time (evaluation excluded) until the first evaluation at or above the dataset's target "
        "accuracy (MLPerf-style; targets in runners/accuracy.py), mean ± 95% CI over the repeats that reached it.",
        points[[c for c in keep if c in points]] if not points.empty else points, flat_grids(points, columns, "accuracy"))


# -- scaling --------------------------------------------------------------------------------

def series_workers(points: pd.DataFrame) -> pd.Series:
    """The loader-worker label of the scaling series each grid point belongs to.

    Usually its worker count. When a grid ties workers to the device count (the seed study
    used 8 workers on 1-2 GPUs and 1 on 4), the tied points form ONE series labelled by
    device order, e.g. '8/8/1', so they are still compared with the 1-device run."""
    out = points["workers"].astype(str)
    for _, g in points.groupby(["experiment", "framework", "model", "batch_size"], sort=False):
        if g["workers"].nunique() > 1 and g.groupby("devices")["workers"].nunique().max() == 1:
            out[g.index] = "/".join(str(w) for w in g.sort_values("devices")["workers"])
    return out


SCALING_VALUE = "steady_epoch_time_s"  # per pass over the split: comparable whatever the epochs a run took


def _cell(point) -> dict:
    """The cell (analysis.noise.CELL_KEYS) of a grid point: a row of grid_points."""
    return {k: getattr(point, k) for k in ("experiment", *GRID_KEYS)}


def _ok_values(runs: pd.DataFrame, point, value: str, **override) -> pd.Series:
    """`value` of the ok runs of one grid point (a row of grid_points), axes overridable."""
    if runs is None or runs.empty or value not in runs:
        return pd.Series(dtype=float)
    key = {k: getattr(point, k) for k in ("experiment", *GRID_KEYS)}
    key.update(override)
    sel = runs["status"] == "ok"
    for k, v in key.items():
        sel &= runs[k] == v
    return pd.to_numeric(runs.loc[sel, value], errors="coerce").dropna()


def scaling_data(points: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Speed-up and parallel efficiency against the fewest devices of each series, from the
    steady-state epoch time (an epoch is one pass over the training split whatever the device
    count, and timing runs stop after different numbers of epochs). With `runs`, each speed-up
    gets its 95% interval (ratio of geometric means over repeats, Welch t on the logs) and a
    verdict; `oversubscribed` marks points with more processes than cores."""
    series = ["experiment", "framework", "model", "batch_size", "series_workers"]
    cols = [*series, "workers", "devices", "base_devices", "epoch_time_s", "base_epoch_time_s", "speedup",
            "low", "high", "dof", "verdict", "ideal_speedup", "efficiency", "n_ok", "statuses", "worst_status",
            "base_status", "oversubscribed", "command"]
    if points.empty:
        return pd.DataFrame(columns=cols)
    points = points.assign(series_workers=series_workers(points))
    value = SCALING_VALUE
    noise = pooled_noise(runs, value)
    out = []
    for _, g in points.groupby(series, sort=False):
        g = g.sort_values("devices")
        base = g.iloc[0]
        base_times = _ok_values(runs, base, value)
        for p in g.itertuples():
            ok = p.n_ok > 0 and base.n_ok > 0 and not pd.isna(getattr(p, f"{value}_mean"))
            speedup, lo, hi, dof = float("nan"), float("nan"), float("nan"), float("nan")
            if ok:
                speedup = getattr(base, f"{value}_mean") / getattr(p, f"{value}_mean")
                if runs is not None and p.devices != base.devices:
                    speedup, lo, hi, dof = noise.ratio(_cell(base), _cell(p), base_times, _ok_values(runs, p, value))
            ideal = p.devices / base.devices
            out.append({**{k: getattr(p, k) for k in series}, "workers": p.workers, "devices": p.devices,
                        "base_devices": base.devices, "epoch_time_s": getattr(p, f"{value}_mean"),
                        "base_epoch_time_s": getattr(base, f"{value}_mean"), "speedup": speedup,
                        "low": lo, "high": hi, "dof": dof, "verdict": verdict(lo, hi, 1.0, "faster", "slower"),
                        "ideal_speedup": ideal, "efficiency": speedup / ideal if ok else float("nan"),
                        "n_ok": p.n_ok, "statuses": p.statuses, "worst_status": p.worst_status,
                        "base_status": base.statuses, "oversubscribed": bool(getattr(p, "oversubscribed", False)),
                        "command": p.command})
    return pd.DataFrame(out, columns=cols)


def scaling_anchor(experiment, model, framework, batch_size, series_workers) -> str:
    """The id of a scaling series' row in the scaling table."""
    return row_anchor("scaling", experiment, model, framework, batch_size, series_workers)


OVERSUBSCRIBED_MARK = "‡"
OVERSUBSCRIBED_TEXT = (f"{OVERSUBSCRIBED_MARK} oversubscribed: more processes (ranks × (1 + loader workers)) than "
                       "CPU cores, so processes take turns on the cores; such a figure measures CPU contention "
                       "and says nothing about GPUs.")


def scaling_table(points: pd.DataFrame, runs: pd.DataFrame | None = None) -> TableSet:
    """Speed-up and parallel efficiency against the fewest devices, per series."""
    data = scaling_data(points, runs)
    grids = []
    for exp, g in data.groupby("experiment", sort=False):
        devices = sorted(g["devices"].unique())
        header = [[("Model", 1), ("Framework", 1), ("Batch size", 1), ("Workers", 1)]
                  + [(f"{d} device{'s' if d > 1 else ''}", 1) for d in devices]]
        rows, prev, ids = [], None, []
        for key, s in paper_order(g, ["model", "framework", "batch_size", "series_workers", "devices"]).groupby(
                ["model", "framework", "batch_size", "series_workers"], sort=False):
            labels = [model_label(key[0]), framework_label(key[1]), str(key[2]), str(key[3])]
            cells = index_cells(labels, prev)
            prev = labels
            ids.append(scaling_anchor(exp, *key))
            by_dev = {r.devices: r for r in s.itertuples()}
            for d in devices:
                r = by_dev.get(d)
                if r is None:
                    cells.append(Cell("—", css="missing"))
                elif r.n_ok == 0:
                    cells.append(Cell(r.statuses, css=f"status status-{r.worst_status}", title=f"rerun: {r.command}"))
                elif pd.isna(r.speedup):
                    cells.append(Cell(f"no baseline ({r.base_status})", css="muted"))
                elif d == r.base_devices:
                    cells.append(Cell("1.00× (baseline)", css="muted", title=f"rerun: {r.command}"))
                else:
                    ci = "" if pd.isna(r.low) else f" ({r.low:.2f}–{r.high:.2f})"
                    mark = f" {OVERSUBSCRIBED_MARK}" if r.oversubscribed else ""
                    cells.append(Cell(f"{r.speedup:.2f}×{ci} · {100 * r.efficiency:.0f}%{mark}",
                                      css="warn" if r.efficiency < EFFICIENCY_WARN else "",
                                      title=f"{r.verdict}; rerun: {r.command}"))
            rows.append(cells)
        grids.append(GridTable(exp, header, rows, n_index=4, row_ids=ids))
    return TableSet(
        "scaling", "Scaling with devices",
        f"Speed-up of the steady-state epoch time (one pass over the training split) over the fewest "
        f"devices measured (usually 1), with its 95% interval ({CI_METHOD_RATIO}), and parallel "
        f"efficiency (speed-up / device ratio). Efficiency below {100 * EFFICIENCY_WARN:.0f}% is "
        f"highlighted: adding devices no longer pays off there. {OVERSUBSCRIBED_TEXT}",
        data, grids)


# -- framework against framework -------------------------------------------------------------

SPEED_KEYS = ("experiment", "model", "devices", "batch_size", "workers")


def speed_anchor(experiment, a, b, model, devices, batch_size, workers) -> str:
    """The id of a configuration's row in the speed table (pair a / b)."""
    return row_anchor("speed", experiment, a, b, model, devices, batch_size, workers)


def speed_data(runs: pd.DataFrame) -> pd.DataFrame:
    """Every pair of frameworks per experiment and configuration: the ratio of their steady-state
    epoch times (a / b, above 1: b is faster) with its 95% interval and verdict (performance runs)."""
    cols = ["a", "b", *SPEED_KEYS, "n_a", "n_b", "estimate", "low", "high", "dof", "verdict", "oversubscribed"]
    perf = performance_runs(runs)
    parts = [framework_comparison(perf, SCALING_VALUE, "ratio", pair).assign(a=pair[0], b=pair[1])
             for pair in framework_pairs(perf)]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=cols)
    data = pd.concat(parts, ignore_index=True)
    over = perf.assign(o=perf.get("oversubscribed", False)).groupby(list(SPEED_KEYS))["o"].agg(
        lambda v: bool(v.fillna(False).astype(bool).any()))
    data["oversubscribed"] = [bool(over.get(tuple(r[k] for k in SPEED_KEYS), False)) for r in data.to_dict("records")]
    return data[cols]


def speed_table(runs: pd.DataFrame) -> TableSet:
    """Framework against framework per configuration: epoch-time ratio with its interval."""
    data = speed_data(runs)
    grids = []
    for (exp, a, b), g in data.groupby(["experiment", "a", "b"], sort=False):
        pair = f"{framework_label(a)} / {framework_label(b)}"
        header = [[("Model", 1), ("Devices", 1), ("Batch size", 1), ("Workers", 1),
                   (f"{pair} epoch time", 1), ("verdict", 1), ("repeats", 1)]]
        rows, prev, ids = [], None, []
        for r in paper_order(g, ["model", "devices", "batch_size", "workers"]).to_dict("records"):
            labels = [model_label(r["model"]), str(r["devices"]), str(r["batch_size"]), str(r["workers"])]
            cells = index_cells(labels, prev)
            prev = labels
            ci = "" if pd.isna(r["low"]) else f" ({r['low']:.2f}–{r['high']:.2f})"
            mark = f" {OVERSUBSCRIBED_MARK}" if r["oversubscribed"] else ""
            cells += [Cell(f"{r['estimate']:.2f}×{ci}{mark}"), Cell(r["verdict"], css="text"),
                      Cell(f"{r['n_a']} / {r['n_b']}")]
            rows.append(cells)
            ids.append(speed_anchor(exp, a, b, *(r[k] for k in SPEED_KEYS[1:])))
        grids.append(GridTable(f"{exp} · {pair}", header, rows, n_index=4, row_ids=ids))
    return TableSet(
        "speed", "Framework against framework",
        "Per configuration: the first framework's steady-state epoch time over the second's (above 1×: the "
        f"second is faster) with its 95% interval ({CI_METHOD_RATIO}), the verdict the interval supports and "
        f"the ok repeats of each. Without pooled noise one repeat per side gives no interval and no verdict. "
        f"{noise_caption(pooled_noise(performance_runs(runs), SCALING_VALUE))} {OVERSUBSCRIBED_TEXT}",
        data, grids, empty_text="No configuration has ok runs of two frameworks.")


# -- one axis at a time: loader workers and batch size -------------------------------------

def axis_effect(points: pd.DataFrame, runs: pd.DataFrame, axis: str, value: str, kind: str) -> pd.DataFrame:
    """Every grid point against the same configuration at the lowest value of `axis`.

    kind "speedup": base / this of a time (above 1: this value of the axis is faster); "gain":
    this / base of a rate. Each with its 95% interval (ratio of geometric means over repeats,
    Welch t on the logs) and verdict, plus the loader's share of a step at both ends."""
    others = ["experiment"] + [k for k in GRID_KEYS if k != axis]
    cols = [*others, axis, f"base_{axis}", "estimate", "low", "high", "dof", "verdict", "n_ok", "base_n_ok",
            "load_share", "base_load_share", "oversubscribed", "command"]
    if points.empty or runs is None:
        return pd.DataFrame(columns=cols)
    above, below = ("faster", "slower") if kind == "speedup" else ("higher", "lower")

    def load_share(p):
        step = p["step_s_mean"]
        return p["step_load_wait_s_mean"] / step if step and not pd.isna(step) else float("nan")

    rows = []
    noise = pooled_noise(runs, value)
    for key, g in points.groupby(others, sort=False):
        if g[axis].nunique() < 2:
            continue
        g = g.sort_values(axis)
        base = g.iloc[0]
        base_vals = _ok_values(runs, base, value)
        for _, p in g.iloc[1:].iterrows():
            this = _ok_values(runs, p, value)
            est, lo, hi, dof = (noise.ratio(_cell(base), _cell(p), base_vals, this) if kind == "speedup"
                                else noise.ratio(_cell(p), _cell(base), this, base_vals))
            rows.append({**dict(zip(others, key)), axis: p[axis], f"base_{axis}": base[axis], "estimate": est,
                         "low": lo, "high": hi, "dof": dof, "verdict": verdict(lo, hi, 1.0, above, below),
                         "n_ok": p["n_ok"], "base_n_ok": base["n_ok"], "load_share": load_share(p),
                         "base_load_share": load_share(base),
                         "oversubscribed": bool(p.get("oversubscribed")) or bool(base.get("oversubscribed")),
                         "command": p["command"]})
    return paper_order(pd.DataFrame(rows, columns=cols), [*others[1:], axis])


def _effect_cell(r, what: str) -> Cell:
    if not r["n_ok"] or not r["base_n_ok"] or pd.isna(r["estimate"]):
        return Cell("no ok runs on both sides", css="muted")
    ci = "" if pd.isna(r["low"]) else f" ({r['low']:.2f}–{r['high']:.2f})"
    mark = f" {OVERSUBSCRIBED_MARK}" if r["oversubscribed"] else ""
    return Cell(f"{r['estimate']:.2f}×{ci}{mark}", css="warn" if r["verdict"] in ("slower", "lower") else "",
                title=f"{what}: {r['verdict']}; rerun: {r['command']}")


def _effect_grids(data: pd.DataFrame, axis: str, index: list, columns, name: str) -> list:
    """Rows `index` (labels), one column group per `columns` [(label, fn(row) -> Cell)] and level;
    row ids row_anchor(name, experiment, *index values)."""
    grids = []
    labels = {"model": model_label, "framework": framework_label}
    names = {"model": "Model", "framework": "Framework", "devices": "Devices", "batch_size": "Batch size",
             "workers": "Workers"}
    for exp, g in data.groupby("experiment", sort=False):
        levels = sorted(g[axis].unique())
        base = g[f"base_{axis}"].iloc[0]
        header = [[(names[k], 1) for k in index]
                  + [(f"{label}: {names[axis].lower()} {base} → {lv}", 1) for lv in levels for label, _ in columns]]
        rows, prev, ids = [], None, []
        for key, s in g.groupby(index, sort=False):
            key = key if isinstance(key, tuple) else (key,)
            ids.append(row_anchor(name, exp, *key))
            text = [labels.get(k, str)(v) if k in labels else str(v) for k, v in zip(index, key)]
            cells = index_cells(text, prev)
            prev = text
            by_level = {r[axis]: r for r in s.to_dict("records")}
            for lv in levels:
                r = by_level.get(lv)
                cells += [fn(r) if r is not None else Cell("—", css="missing") for _, fn in columns]
            rows.append(cells)
        grids.append(GridTable(exp, header, rows, n_index=len(index), row_ids=ids))
    return grids


def workers_table(points: pd.DataFrame, runs: pd.DataFrame | None) -> TableSet:
    """Loader workers against in-process sampling: speed-up of the epoch and the loader's wait."""
    data = axis_effect(points, runs, "workers", SCALING_VALUE, "speedup")

    def wait(r):
        if pd.isna(r["load_share"]) or pd.isna(r["base_load_share"]):
            return Cell("n/a", css="muted")
        return Cell(f"{fmt_pct(r['base_load_share'])} → {fmt_pct(r['load_share'])}")

    columns = [("speed-up", lambda r: _effect_cell(r, "speed-up")), ("loader wait", wait)]
    return TableSet(
        "workers", "Loader workers",
        "Speed-up of the steady-state epoch time from the fewest loader workers per rank (usually 0: "
        f"sampling in the training process) to more ({CI_METHOD_RATIO}; highlighted: slower), and the share of "
        "a training step spent waiting for the loader at both settings. A worker samples ahead while the "
        f"rank computes, which pays only where cores are free for it. {OVERSUBSCRIBED_TEXT}",
        data, _effect_grids(data, "workers", ["model", "framework", "devices", "batch_size"], columns, "workers"),
        empty_text="Only one loader-worker setting was measured.")


def batch_table(points: pd.DataFrame, runs: pd.DataFrame | None) -> TableSet:
    """Throughput gain from a larger batch size per process."""
    data = axis_effect(points, runs, "batch_size", "steady_seed_nodes_per_s", "gain")
    columns = [("throughput gain", lambda r: _effect_cell(r, "throughput gain"))]
    return TableSet(
        "batch", "Batch size",
        "Steady-state throughput (seed nodes per second, all processes) at a larger batch size per process "
        f"over the smallest ({CI_METHOD_RATIO}; highlighted: lower). Larger batches mean fewer steps, so fewer "
        f"gradient all-reduces per epoch, but a larger sampled subgraph per step. {OVERSUBSCRIBED_TEXT}",
        data, _effect_grids(data, "batch_size", ["model", "framework", "devices", "workers"], columns, "batch"),
        empty_text="Only one batch size was measured.")


# -- flat tables: breakdown and throughput --------------------------------------------------

def point_anchor(name: str, p) -> str:
    """The id of a grid point's row in a flat table `name` (breakdown, throughput, accuracy)."""
    return row_anchor(name, p["experiment"], *(p[k] for k in FLAT_KEYS))


FLAT_KEYS = ("model", "framework", "devices", "batch_size", "workers")


def flat_grids(points: pd.DataFrame, columns: list, name: str = "") -> list:
    """Rows model x framework x devices x batch x workers; `columns` = [(label, fn(point)->Cell)];
    with `name`, each row's id is point_anchor(name, point)."""
    grids = []
    for exp, g in points.groupby("experiment", sort=False):
        header = [[("Model", 1), ("Framework", 1), ("Devices", 1), ("Batch size", 1), ("Workers", 1)]
                  + [(label, 1) for label, _ in columns]]
        rows, prev = [], None
        recs = paper_order(g, list(FLAT_KEYS)).to_dict("records")
        for p in recs:
            labels = [model_label(p["model"]), framework_label(p["framework"]), str(p["devices"]),
                      str(p["batch_size"]), str(p["workers"])]
            cells = index_cells(labels, prev)
            prev = labels
            if p["n_ok"] > 0:
                cells += [fn(p) for _, fn in columns]
            else:
                cells.append(Cell(p["statuses"], css=f"status status-{p['worst_status']}",
                                  title=f"rerun: {p['command']}", span=len(columns)))
            rows.append(cells)
        grids.append(GridTable(exp, header, rows, n_index=5,
                               row_ids=[point_anchor(name, p) for p in recs] if name else None))
    return grids


def breakdown_table(points: pd.DataFrame) -> TableSet:
    """Mean time per training step split into phases, and the loader's share."""
    phase_cols = [f"step_{p}" for p in PHASE_COLUMNS]
    def ms(col):
        return lambda p: Cell(fmt_num(1000 * p[f"{col}_mean"]) if not pd.isna(p[f"{col}_mean"]) else "n/a")
    def share(p):
        total = p["step_s_mean"]
        return Cell(fmt_pct(p["step_load_wait_s_mean"] / total) if total and not pd.isna(total) else "n/a")
    columns = [(f"{PHASE_LABELS[ph]} (ms)", ms(f"step_{ph}")) for ph in PHASE_COLUMNS]
    columns += [("whole step (ms)", ms("step_s")), ("loader share", share)]
    keep = ["experiment", *GRID_KEYS, "n_ok"] + [f"{c}_mean" for c in phase_cols + ["step_s"]]
    return TableSet(
        "breakdown", "Where a training step's time goes",
        "Mean time per training step (milliseconds, averaged over all steps of all ranks, then over "
        "repeats) split into phases. The backward phase includes DDP's gradient all-reduce. "
        "Loader share = time waiting for the next mini-batch / whole step. GPU runs show n/a unless "
        "they ran with --breakdown on: CUDA work is asynchronous, so phase times taken without a "
        "synchronisation at every phase edge would be CPU launch times, and they are not recorded.",
        points[keep] if not points.empty else points, flat_grids(points, columns, "breakdown"))


def throughput_table(points: pd.DataFrame) -> TableSet:
    """Steady-state and warm-up epoch, rates, start-up and its ratio to the timed part."""
    def rate(col):
        def cell(p):
            m, ci = p[f"{col}_mean"], p[f"{col}_ci95"]
            return Cell(fmt_si(m) + ("" if pd.isna(ci) else f" ± {fmt_si(ci)}"))
        return cell

    def steady(p):
        m, ci = p["steady_epoch_time_s_mean"], p["steady_epoch_time_s_ci95"]
        if pd.isna(m):
            return Cell("n/a", css="muted", title="no epoch after the warm-up epoch")
        return Cell(fmt_num(m) + ("" if pd.isna(ci) else f" ± {fmt_num(ci, ref=m)}"))

    columns = [("steady-state epoch (s)", steady),
               ("epoch CV", lambda p: Cell(fmt_pct(p["steady_epoch_cv_mean"]))),
               ("warm-up epoch (s)", lambda p: Cell(fmt_num(p["warmup_epoch_time_s_mean"]))),
               ("steps / epoch", lambda p: Cell(fmt_num(p["steps_per_epoch_mean"]))),
               ("seed nodes / s", rate("throughput_seed_nodes_per_s")),
               ("sampled edges / s †", rate("sampled_edges_per_s")),
               ("start-up (s)", lambda p: Cell(fmt_num(p["startup_s_mean"]))),
               ("timed / start-up", lambda p: Cell(
                   "n/a" if pd.isna(p["timed_to_startup_ratio_mean"]) else f"{p['timed_to_startup_ratio_mean']:.1f}×",
                   css="warn" if p["timed_to_startup_ratio_mean"] < TIMED_TO_STARTUP_WARN else ""))]
    values = ("steady_epoch_time_s", "steady_epoch_cv", "warmup_epoch_time_s", "steps_per_epoch",
              "throughput_seed_nodes_per_s", "sampled_edges_per_s", "median_epoch_time_s", "startup_s",
              "timed_to_startup_ratio")
    keep = ["experiment", *GRID_KEYS, "n_ok"] + [f"{c}_{s}" for c in values for s in ("mean", "ci95")]
    return TableSet(
        "throughput", "Steady state, warm-up and throughput",
        "Steady-state epoch time: the median epoch time (slowest rank) after the first epoch, which is "
        "reported apart as warm-up (loader start, first touch of the graph, lazy initialisation); mean ± 95% "
        "CI over repeats, and the mean coefficient of variation of the steady epochs within a run. Seed nodes "
        "per second by all processes together over the whole training time. † Sampled edges mean different "
        "things in the two frameworks (PyG: edges of the sampled subgraph, once; DGL: the sum over layers' "
        "blocks, a node's neighbours counted once per layer): compare them within a framework only. Start-up "
        f"is the time before the first step (not training time); timed / start-up below "
        f"{TIMED_TO_STARTUP_WARN:.0f}× is highlighted: such runs measure mostly start-up effects.",
        points[[c for c in keep if c in points]] if not points.empty else points, flat_grids(points, columns, "throughput"))


# -- the seed study, side by side ------------------------------------------------------------

def load_paper(path: Path = PAPER_CSV) -> pd.DataFrame:
    """The seed study's published Table 2 (model, gpus, workers, batch_size, framework, seconds)."""
    return pd.read_csv(path)


PAPER_COLUMNS = ["experiment", "model", "devices", "workers", "batch_size", "framework", "paper_s",
                 "ours_s", "ours_ci95", "ours_status", "paper_per_epoch_s", "ours_per_epoch_s", "ours_epochs"]
PAPER_KEYS = ["model", "devices", "workers", "batch_size", "framework"]


def paper_comparison(points: pd.DataFrame, paper: pd.DataFrame) -> TableSet:
    """Our Table 2 on the seed study's dataset next to the published numbers."""
    ours = points[points["dataset"] == PAPER_DATASET]
    if ours.empty:
        return _published_only(paper)
    rows, grids = [], []
    paper = paper.rename(columns={"gpus": "devices", "seconds": "paper_s"})
    for exp, g in ours.groupby("experiment", sort=False):
        exp_rows = _paper_rows(exp, g, paper)
        rows += exp_rows
        grids.append(_paper_grid(exp, pd.DataFrame(exp_rows)))
    return TableSet(
        "paper_comparison", "Our Table 2 beside the seed study's",
        f"Seed study: {PAPER_SETUP} (published Table 2, seconds). Ours: the same layout from our "
        f"runs on {PAPER_DATASET}, projected to {PAPER_EPOCHS} epochs (warm-up epoch + {PAPER_EPOCHS - 1} × the "
        f"steady-state epoch); absolute times differ with hardware, so compare which framework is faster "
        f"(bold, per source) and the trends. The CSV also has per-epoch times.",
        pd.DataFrame(rows, columns=PAPER_COLUMNS), grids)


def _published_only(paper: pd.DataFrame) -> TableSet:
    """The seed study's Table 2 alone, while no run is on its dataset."""
    published = paper.rename(columns={"gpus": "devices"}).assign(
        experiment=f"Seed study, published: {PAPER_SETUP}", n_ok=1, n_runs=1, statuses="ok",
        worst_status="ok", command="", train_time_s_mean=paper["seconds"], train_time_s_ci95=float("nan"))
    return TableSet("paper_comparison", "The seed study's Table 2",
                    f"No runs on the seed study's dataset ({PAPER_DATASET}) yet: run the paper profile to put "
                    f"ours beside it. Its published numbers (seconds, faster framework bold):",
                    pd.DataFrame(columns=PAPER_COLUMNS), table2_grids(published, "train_time_s", best="min"))


def _paper_rows(exp: str, g: pd.DataFrame, paper: pd.DataFrame) -> list:
    """One experiment's grid points beside the published seconds (outer join: either may be missing)."""
    epochs = int(g["epochs"].max())
    merged = paper.merge(g, on=PAPER_KEYS, how="outer")
    exp_rows = []
    for r in merged.itertuples():
        ok = not pd.isna(r.n_ok) and r.n_ok > 0
        # Ours projected to the study's 50 epochs: the warm-up epoch plus 49 steady ones.
        projected = r.warmup_epoch_time_s_mean + (PAPER_EPOCHS - 1) * r.steady_epoch_time_s_mean if ok else None
        exp_rows.append({"experiment": exp, **{k: getattr(r, k) for k in PAPER_KEYS}, "paper_s": r.paper_s,
                         "ours_s": projected if ok else float("nan"),
                         "ours_ci95": (PAPER_EPOCHS - 1) * r.steady_epoch_time_s_ci95 if ok else float("nan"),
                         "ours_status": "not run" if pd.isna(r.n_ok) else ("ok" if ok else r.statuses),
                         "paper_per_epoch_s": r.paper_s / PAPER_EPOCHS,
                         "ours_per_epoch_s": r.steady_epoch_time_s_mean if ok else float("nan"),
                         "ours_epochs": epochs})
    return exp_rows


def _paper_grid(exp: str, d: pd.DataFrame) -> GridTable:
    """Rows model x devices x workers; per batch size and framework the paper's seconds and ours."""
    batches = sorted(d["batch_size"].unique())
    header = [[("Model", 1), ("Devices", 1), ("Workers", 1)] + [(f"Batch size {b}", 2 * len(FRAMEWORK_ORDER)) for b in batches],
              [("", 1)] * 3 + [(framework_label(f), 2) for b in batches for f in FRAMEWORK_ORDER],
              [("", 1)] * 3 + [(s, 1) for b in batches for f in FRAMEWORK_ORDER
                               for s in ("paper", f"ours ({PAPER_EPOCHS} ep., projected)")]]
    body, prev = [], None
    for rk in paper_order(d[["model", "devices", "workers"]].drop_duplicates(), ["model", "devices", "workers"]).itertuples(index=False):
        labels = [model_label(rk.model), str(rk.devices), str(rk.workers)]
        cells = index_cells(labels, prev)
        prev = labels
        for b in batches:
            sel = d[(d.model == rk.model) & (d.devices == rk.devices) & (d.workers == rk.workers) & (d.batch_size == b)]
            cells += _paper_cells({r.framework: r for r in sel.itertuples()})
        body.append(cells)
    return GridTable(exp, header, body, n_index=3)


def _paper_cells(by_fw: dict) -> list:
    """One batch size's cells: paper then ours per framework, the faster framework of each source bold."""
    group = {}
    for src in ("paper_s", "ours_s"):
        vals = {f: getattr(by_fw[f], src) for f in FRAMEWORK_ORDER if f in by_fw and not pd.isna(getattr(by_fw[f], src))}
        winner = min(vals, key=vals.get) if len(vals) >= 2 and list(vals.values()).count(min(vals.values())) == 1 else None
        for f in FRAMEWORK_ORDER:
            r = by_fw.get(f)
            if r is None or (src == "paper_s" and pd.isna(r.paper_s)):
                group[(f, src)] = Cell("—", css="missing")
            elif src == "ours_s" and pd.isna(r.ours_s):
                st = r.ours_status  # most severe status first
                group[(f, src)] = Cell(st, css="missing" if st == "not run" else f"status status-{st.split()[0].rstrip(',')}")
            else:
                v = getattr(r, src)
                text = fmt_num(v) + ("" if src == "paper_s" or pd.isna(r.ours_ci95) else f" ± {fmt_num(r.ours_ci95, ref=v)}")
                group[(f, src)] = Cell(text, css=("best" if winner == f else "") + (" paper" if src == "paper_s" else ""))
    return [group[(f, src)] for f in FRAMEWORK_ORDER for src in ("paper_s", "ours_s")]


# -- why the seed study saw what it saw: study harness vs fair harness ------------------------

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
                   "run `snakemake --cores all --configfile config/study.yaml`.")


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


# -- all tables -----------------------------------------------------------------------------

def all_tables(runs: pd.DataFrame, paper: pd.DataFrame | None = None) -> dict:
    """name -> TableSet for every table of the report (runs must carry `experiment`)."""
    points = performance_points(runs)
    tables = [training_time_table(points), speed_table(runs), scaling_table(points, runs), workers_table(points, runs),
              batch_table(points, runs), breakdown_table(points),
              throughput_table(points), accuracy_table(points),
              paper_comparison(points, load_paper() if paper is None else paper),
              study_work_table(runs), study_time_table(points)]
    return {t.name: t for t in tables}


# -- memory: the pre-flight model vs the measured peak ---------------------------------------

MEMORY_KEYS = ("harness", "framework", "model", "strategy", "dataset", "devices", "workers", "batch_size",
               "mem_limit_bytes")
# What the measured peak covers, by strategy: the same processes as the model it is set against.
MEASURED = {"replicated": "ranks + loader workers",
            "partitioned": "node 0's host: graph server + trainers (modelled without the torchrun agent)"}


def memory_model_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Modelled vs measured peak host memory per configuration (one row per configuration).

    mem_model_bytes is the pre-flight model (runners.memory.model); mem_peak_bytes the highest
    measured peak over the configuration's runs (PSS of ranks + loader workers at the worst
    sample of rank*/cpu.csv); mem_cgroup_peak_bytes the memory cgroup's own peak when the run
    was capped (--memory-limit). A run killed before its first epoch ended has no cpu.csv
    sample, so its measured peak is empty and the cgroup's peak is the evidence. A partitioned
    run's model counts its host's graph server, so its measured peak is the host's (runs.csv
    mem_host_peak_bytes: server + trainers sampled together) and its model that of the same
    processes (mem_model_sampled_bytes: without the torchrun agent, which is not sampled).
    """
    cols = [k for k in MEMORY_KEYS if k in runs.columns or k == "strategy"]
    out_cols = cols + ["runs", "statuses", "measured", "mem_model_bytes", "mem_peak_bytes", "mem_cgroup_peak_bytes",
                       "peak_over_model", "model_over_limit", "oom_killed"]
    if runs.empty or "mem_model_bytes" not in runs.columns:
        return pd.DataFrame(columns=out_cols)
    df = runs.copy()
    for c in ("mem_peak_bytes", "mem_cgroup_peak_bytes", "mem_limit_bytes", "oom_killed", "mem_host_peak_bytes",
              "mem_model_sampled_bytes"):
        if c not in df.columns:
            df[c] = None
    df["strategy"] = df["strategy"].fillna("replicated") if "strategy" in df.columns else "replicated"
    part = df["strategy"] == "partitioned"
    num = lambda c: pd.to_numeric(df[c], errors="coerce").astype(float)  # noqa: E731
    df["mem_peak_bytes"] = num("mem_peak_bytes").where(~part, num("mem_host_peak_bytes"))
    df["mem_model_bytes"] = num("mem_model_bytes").where(~part, num("mem_model_sampled_bytes"))
    keyed = df[cols].astype(object).where(df[cols].notna(), "none")
    rows = []
    for key, g in df.groupby([keyed[c] for c in cols], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        num = lambda c: pd.to_numeric(g[c], errors="coerce")  # noqa: E731
        model = num("mem_model_bytes").max()
        peak = num("mem_peak_bytes").max()
        limit = num("mem_limit_bytes").max()
        killed = sorted({str(x) for x in g["oom_killed"].dropna() if str(x)})
        rows.append({**dict(zip(cols, key)), "runs": len(g),
                     "statuses": status_text(Counter(g["status"])),
                     "measured": MEASURED.get(g["strategy"].iloc[0], MEASURED["replicated"]),
                     "mem_model_bytes": model, "mem_peak_bytes": peak,
                     "mem_cgroup_peak_bytes": num("mem_cgroup_peak_bytes").max(),
                     "peak_over_model": peak / model if model and peak == peak else None,
                     "model_over_limit": model / limit if limit and limit == limit else None,
                     "oom_killed": "; ".join(killed) or None})
    return pd.DataFrame(rows, columns=out_cols)
