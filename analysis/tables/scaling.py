"""How far each framework scales: speed-up and parallel efficiency against the fewest devices
of each scaling series, with its 95% interval, and the table of it.
"""

from __future__ import annotations

import pandas as pd

from analysis import GRID_KEYS, framework_label, model_label
from analysis.display import Cell, GridTable, TableSet, index_cells, row_anchor
from analysis.grouping import paper_order
from analysis.repeats.noise import pooled_noise
from analysis.stats import CI_METHOD_RATIO, verdict

EFFICIENCY_WARN = 0.5   # parallel efficiency below this: scaling has stopped paying off
SUPERLINEAR_WARN = 1.2  # above this the baseline was probably disturbed, not the scaling superb

OVERSUBSCRIBED_MARK = "‡"
OVERSUBSCRIBED_TEXT = (f"{OVERSUBSCRIBED_MARK} oversubscribed: more processes (ranks × (1 + loader workers)) than "
                       "CPU cores, so processes take turns on the cores; such a figure measures CPU contention "
                       "and says nothing about GPUs.")


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


def noise_cell(point) -> dict:
    """The cell (analysis.repeats.noise.CELL_KEYS) of a grid point: a row of grid_points."""
    return {k: getattr(point, k) for k in ("experiment", *GRID_KEYS)}


def ok_values(runs: pd.DataFrame, point, value: str, **override) -> pd.Series:
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
        base_times = ok_values(runs, base, value)
        for p in g.itertuples():
            ok = p.n_ok > 0 and base.n_ok > 0 and not pd.isna(getattr(p, f"{value}_mean"))
            speedup, lo, hi, dof = float("nan"), float("nan"), float("nan"), float("nan")
            if ok:
                speedup = getattr(base, f"{value}_mean") / getattr(p, f"{value}_mean")
                if runs is not None and p.devices != base.devices:
                    speedup, lo, hi, dof = noise.ratio(noise_cell(base), noise_cell(p), base_times, ok_values(runs, p, value))
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


def scaling_table(data: pd.DataFrame) -> TableSet:
    """Speed-up and parallel efficiency against the fewest devices, per series (`data`: scaling_data)."""
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
