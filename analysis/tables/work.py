"""Why one framework is slower: its epoch-time ratio split into work and time per unit of work.

Per framework pair and configuration, time ratio = work ratio x time-per-work ratio. The work is
what the runs recorded per step from the frameworks' own batch objects (runners.adapters.Batch.work,
the mean per step in runs.csv's step_* work columns). The unit of work is the edge update (a
message over one edge in one layer, summed over the layers) for GraphSAGE and GAT alike: their
aggregation runs over edges, and it is the unit in which PyG's untrimmed layers and DGL's
shrinking blocks differ most. Node updates (the rows each layer writes: the linear parts) stand
beside it. The steps of both frameworks' runs at a configuration train the same seeds, so a run's
epoch time is its steps' time and the ratios of epoch time and of step time agree.

A configuration's work varies little between its runs (the caption states the largest spread),
so a time-per-work ratio carries the time ratio's 95% interval (the pooled launch noise of the
speed table) divided by the work ratio. Per phase: the forward and backward passes against edge
updates, and the loader's wait against the edges sampled (with loader workers the wait is what
the workers did not hide, not the sampling itself).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import PHASE_COLUMNS, framework_label, model_label
from analysis.comparisons import framework_comparison
from analysis.display import Cell, GridTable, TableSet, index_cells
from analysis.grouping import adapter_choice, paper_order
from analysis.stats import CI_METHOD_RATIO

KEYS = ("experiment", "model", "devices", "batch_size", "workers")
# unit -> (runs.csv column of its mean per step, what the page calls it)
UNITS = {"edges": ("step_layer_edges", "edge updates"), "nodes": ("step_layer_dst_nodes", "node updates"),
         "sampled": ("step_sampled_edges", "sampled edges"), "features": ("step_feature_bytes", "feature bytes")}
# Phases whose time is read against a unit of work: name -> (runs.csv time columns, unit, label)
PHASES = {"compute": (("step_forward_s", "step_backward_s"), "edges", "forward + backward per edge update"),
          "loader": (("step_load_wait_s",), "sampled", "loader wait per sampled edge")}


def work_means(perf: pd.DataFrame) -> pd.DataFrame:
    """The mean work per step of each framework at each configuration (ok runs), indexed by KEYS +
    framework, and `edges_spread`: the relative spread (max/min - 1) of edge updates between runs."""
    ok = perf[perf["status"] == "ok"] if len(perf) else perf
    cols = [c for c, _ in UNITS.values()]
    if ok.empty or any(c not in ok for c in cols):
        return pd.DataFrame()
    ok = ok.assign(**{c: pd.to_numeric(ok[c], errors="coerce") for c in cols})
    g = ok.groupby(list(KEYS) + ["framework"], sort=False)
    means = g[cols].mean()
    edges = g[UNITS["edges"][0]]
    means["edges_spread"] = edges.max() / edges.min() - 1
    return means


def with_work(data: pd.DataFrame, perf: pd.DataFrame) -> pd.DataFrame:
    """tables.speed.speed_data's rows (`data`) with each unit's work ratio a / b (`<unit>_work`) and
    the time per edge update's ratio with its interval (`per_edge`, `per_edge_low`, `per_edge_high`);
    NaN where the runs recorded no work (results older than the work columns)."""
    data = data.copy()
    means = work_means(perf)
    for unit in UNITS:
        data[f"{unit}_work"] = [_ratio(means, r, UNITS[unit][0]) for r in data.to_dict("records")]
    for k in ("", "_low", "_high"):
        data[f"per_edge{k}"] = data[{"": "estimate", "_low": "low", "_high": "high"}[k]] / data["edges_work"]
    return data


def _ratio(means: pd.DataFrame, row: dict, column: str) -> float:
    """Framework a's mean of `column` over framework b's at the row's configuration (NaN: unknown)."""
    if means.empty:
        return float("nan")
    key = tuple(row[k] for k in KEYS)
    try:
        a, b = means.loc[key + (row["a"],), column], means.loc[key + (row["b"],), column]
    except KeyError:
        return float("nan")
    return float(a / b) if b and a == a and b == b else float("nan")


def work_data(speed: pd.DataFrame, perf: pd.DataFrame) -> pd.DataFrame:
    """Per pair and configuration with recorded work (speed: tables.speed.speed_data): the epoch-time
    ratio, the work ratios, the time per edge update, and per phase (PHASES) the phase's time ratio
    and its time per unit of work, each with its 95% interval."""
    if speed.empty or "edges_work" not in speed:
        return pd.DataFrame()
    data = speed[speed["edges_work"].notna()].copy()
    if data.empty:
        return data
    ok = perf[perf["status"] == "ok"]
    for phase, (columns, unit, _) in PHASES.items():
        timed = ok.assign(**{f"step_{phase}": sum(pd.to_numeric(ok[c], errors="coerce") for c in columns)})
        parts = [framework_comparison(timed, f"step_{phase}", "ratio", pair).assign(a=pair[0], b=pair[1])
                 for pair in dict.fromkeys(zip(data["a"], data["b"]))]
        cmp = pd.concat(parts, ignore_index=True)[["a", "b", *KEYS, "estimate", "low", "high"]]
        cmp = cmp.rename(columns={"estimate": phase, "low": f"{phase}_low", "high": f"{phase}_high"})
        data = data.merge(cmp, on=["a", "b", *KEYS], how="left")
        for k in ("", "_low", "_high"):
            data[f"{phase}_per_work{k}"] = data[f"{phase}{k}"] / data[f"{unit}_work"]
    return with_loader_bound(data, ok)


def with_loader_bound(data: pd.DataFrame, ok: pd.DataFrame) -> pd.DataFrame:
    """`a_loader_share`: the share of framework a's step its loader wait takes (the sampling itself
    without loader workers), and `without_loader`: the time ratio if that wait took no time, the
    most a faster sampler could close of the gap."""
    phases = [f"step_{c}" for c in PHASE_COLUMNS if f"step_{c}" in ok]
    if "step_load_wait_s" not in phases:
        return data.assign(a_loader_share=math.nan, without_loader=math.nan).reset_index(drop=True)
    t = ok.assign(**{c: pd.to_numeric(ok[c], errors="coerce") for c in phases})
    g = t.groupby(list(KEYS) + ["framework"], sort=False)
    share = g["step_load_wait_s"].mean() / g[phases].mean().sum(axis=1)
    data = data.assign(a_loader_share=[share.get(tuple(r[k] for k in KEYS) + (r["a"],), math.nan)
                                       for r in data.to_dict("records")])
    return data.assign(without_loader=data["estimate"] * (1 - data["a_loader_share"])).reset_index(drop=True)


def samplers(perf: pd.DataFrame) -> dict:
    """framework -> the samplers its ok runs recorded (their adapters' own words), in order."""
    if perf.empty:
        return {}
    out = {}
    for fw, found in zip(perf["framework"], adapter_choice(perf, "sampler")):
        if found:
            out.setdefault(fw, {})[found] = None  # a dict keeps the order they were seen in
    return {fw: list(names) for fw, names in out.items()}


def _share(v) -> str:
    return "–" if v is None or v != v else f"{100 * v:.0f} %"


def _times(v) -> str:
    return "–" if v is None or v != v else f"{v:.2f}×"


def _ci(r: dict, col: str) -> str:
    est, lo, hi = r[col], r.get(f"{col}_low"), r.get(f"{col}_high")
    if est != est:
        return "–"
    return f"{est:.2f}×" + ("" if lo is None or lo != lo else f" ({lo:.2f}–{hi:.2f})")


def work_table(data: pd.DataFrame, perf: pd.DataFrame) -> TableSet:
    """Work and time per unit of work, framework against framework per configuration (`data`:
    work_data); `perf` is where the caption reads how much a configuration's work varies."""
    grids = []
    for (exp, a, b), g in (data.groupby(["experiment", "a", "b"], sort=False) if len(data) else []):
        pair = f"{framework_label(a)} / {framework_label(b)}"
        header = [[("Model", 1), ("Devices", 1), ("Batch size", 1), ("Workers", 1), ("epoch time", 1),
                   ("edge updates", 1), ("node updates", 1), ("time per edge update", 1),
                   (PHASES["compute"][2], 1), (PHASES["loader"][2], 1), (f"{framework_label(a)}'s loader wait", 1),
                   ("epoch time without it", 1)]]
        rows, prev = [], None
        for r in paper_order(g, ["model", "devices", "batch_size", "workers"]).to_dict("records"):
            labels = [model_label(r["model"]), str(r["devices"]), str(r["batch_size"]), str(r["workers"])]
            cells = index_cells(labels, prev)
            prev = labels
            r = {**r, "estimate_low": r["low"], "estimate_high": r["high"]}
            cells += [Cell(_ci(r, "estimate")), Cell(f"{r['edges_work']:.2f}×"), Cell(f"{r['nodes_work']:.2f}×"),
                      Cell(_ci(r, "per_edge")), Cell(_ci(r, "compute_per_work")), Cell(_ci(r, "loader_per_work")),
                      Cell(_share(r["a_loader_share"])), Cell(_times(r["without_loader"]))]
            rows.append(cells)
        grids.append(GridTable(f"{exp} · {pair}", header, rows, n_index=4))
    ok = perf[perf["status"] == "ok"] if len(perf) else perf
    ran = samplers(ok)
    sampled = ("; ".join(f"{framework_label(f)}: {', '.join(names)}" for f, names in ran.items())
               if ran else "not recorded")
    means = work_means(perf)
    spread = float(np.nanmax(means["edges_spread"])) if len(means) and means["edges_spread"].notna().any() else None
    varies = (f" A configuration's edge updates per step vary by at most {100 * spread:.1f} % between its runs, so "
              "a time per unit of work carries the time ratio's interval divided by the work ratio."
              if spread is not None else "")
    return TableSet(
        "work", "Why one framework is slower: work and time per unit of work",
        "Per configuration, the first framework over the second: the steady-state epoch time (as the speed "
        "table), the work per step both recorded from their own batch objects (edge updates: messages over one "
        "edge in one layer, summed over the layers; node updates: the rows each layer writes), and the time "
        "per unit of work, so that time ratio = work ratio × time per edge update. Per phase: forward + backward "
        "per edge update, and the loader's wait per edge sampled (with loader workers, the wait the workers "
        "did not hide). The last two columns bound what a faster sampler could do: the share of the first "
        "framework's step its loader wait takes, and the epoch-time ratio with that wait at zero. The samplers "
        f"that ran, as the adapters recorded them: {sampled}. 95% intervals: {CI_METHOD_RATIO}.{varies}",
        data, grids, empty_text="No configuration has ok runs of two frameworks with recorded work "
                                "(results from before the work columns have none).")


WORK_BARS = (("estimate", "epoch time", "#555555"), ("edges_work", "edge updates (work)", "#8da0cb"),
             ("per_edge", "time per edge update", "#fc8d62"))


def work_bars(work: pd.DataFrame):
    """Why one framework is slower (tables.work.work_data): per configuration, the epoch-time ratio
    and the two factors it splits into, work (edge updates per step) and time per edge update,
    as horizontal bars on one log axis (95% intervals on the time ratios), a line at parity. Drawn
    here, beside the question's data and table (analysis.report.plots holds the shared figure helpers)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from analysis.report.plots import _finish, placeholder, spaced_ticks

    title = "Why one framework is slower: epoch time = work × time per unit of work"
    if work.empty:
        return placeholder(title, "No configuration has ok runs of two frameworks with recorded work.")
    rows = paper_order(work, ["experiment", "a", "b", "model", "devices", "batch_size", "workers"]).to_dict("records")
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(rows) + 1.4), layout="constrained")
    height = 0.8 / len(WORK_BARS)
    for y, r in enumerate(rows):
        for i, (col, _, colour) in enumerate(WORK_BARS):
            v, lo, hi = r[col], r.get(f"{col}_low", r.get("low")), r.get(f"{col}_high", r.get("high"))
            if col == "edges_work":
                lo = hi = float("nan")
            if pd.isna(v):
                continue
            yy = y - 0.4 + height * (i + 0.5)
            ax.barh(yy, math.log(v), left=0, height=height * 0.9, color=colour)
            if not pd.isna(lo):
                ax.errorbar([math.log(v)], [yy], xerr=[[math.log(v) - math.log(lo)], [math.log(hi) - math.log(v)]],
                            fmt="none", ecolor="#222222", capsize=2, linewidth=0.8)
            ax.text(math.log(v), yy, f" {v:.2f}×", va="center", ha="left" if v >= 1 else "right", fontsize=6.5)
    ax.axvline(0, color="#444444", linewidth=1)
    span = [math.log(r[c]) for r in rows for c, _, _ in WORK_BARS if not pd.isna(r[c])]
    lo, hi = min(0.0, *span), max(0.0, *span)
    ax.set_xlim(lo - 0.25 * (hi - lo + 0.1), hi + 0.25 * (hi - lo + 0.1))
    ticks = spaced_ticks(math.exp(ax.get_xlim()[0]), math.exp(ax.get_xlim()[1]))
    ax.set_xticks([math.log(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}×" for t in ticks])
    ax.set_yticks(range(len(rows)))
    exps = len({r["experiment"] for r in rows})
    ax.set_yticklabels([(f"{r['experiment']}: " if exps > 1 else "")
                        + f"{framework_label(r['a'])}/{framework_label(r['b'])} {model_label(r['model'])}, "
                        f"{r['devices']}d b{r['batch_size']} w{r['workers']}" for r in rows], fontsize=7.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("first framework / second (log scale; right of the line: the first takes more)", fontsize=8)
    _finish(fig, title, [Patch(facecolor=c, label=label) for _, label, c in WORK_BARS], ncol=3)
    return fig
