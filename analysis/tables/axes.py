"""One axis at a time: what more loader workers or a larger batch size do to the same
configuration, with 95% intervals, and the tables of both.
"""

from __future__ import annotations

import pandas as pd

from analysis import GRID_KEYS, framework_label, model_label
from analysis.display import Cell, GridTable, TableSet, index_cells, row_anchor
from analysis.formatting import fmt_pct
from analysis.grouping import paper_order
from analysis.repeats.noise import pooled_noise
from analysis.stats import CI_METHOD_RATIO, verdict
from analysis.tables.scaling import OVERSUBSCRIBED_MARK, OVERSUBSCRIBED_TEXT, SCALING_VALUE, noise_cell, ok_values


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
        base_vals = ok_values(runs, base, value)
        for _, p in g.iloc[1:].iterrows():
            this = ok_values(runs, p, value)
            est, lo, hi, dof = (noise.ratio(noise_cell(base), noise_cell(p), base_vals, this) if kind == "speedup"
                                else noise.ratio(noise_cell(p), noise_cell(base), this, base_vals))
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
