"""Which framework is faster: per configuration, the ratio of the frameworks' steady-state
epoch times with its 95% interval and verdict, and the table of it.
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.comparisons import framework_comparison, framework_pairs
from analysis.display import Cell, GridTable, TableSet, index_cells, row_anchor
from analysis.grouping import paper_order, performance_runs
from analysis.repeats.noise import caption as noise_caption
from analysis.repeats.noise import pooled_noise
from analysis.stats import CI_METHOD_RATIO
from analysis.tables.work import with_work
from analysis.tables.scaling import OVERSUBSCRIBED_MARK, OVERSUBSCRIBED_TEXT, SCALING_VALUE

SPEED_KEYS = ("experiment", "model", "devices", "batch_size", "workers")


def speed_anchor(experiment, a, b, model, devices, batch_size, workers) -> str:
    """The id of a configuration's row in the speed table (pair a / b)."""
    return row_anchor("speed", experiment, a, b, model, devices, batch_size, workers)


def speed_data(runs: pd.DataFrame) -> pd.DataFrame:
    """Each framework against the reference (comparisons.framework_pairs) per experiment and
    configuration: the ratio of their steady-state epoch times (a / b, above 1: b is faster) with its
    95% interval and verdict (performance runs), and the ratios of their work per step and time per
    edge update (tables.work.with_work)."""
    cols = ["a", "b", *SPEED_KEYS, "n_a", "n_b", "estimate", "low", "high", "dof", "verdict", "oversubscribed"]
    perf = performance_runs(runs)
    parts = [framework_comparison(perf, SCALING_VALUE, "ratio", pair).assign(a=pair[0], b=pair[1])
             for pair in framework_pairs(perf)]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return with_work(pd.DataFrame(columns=cols), perf)
    data = pd.concat(parts, ignore_index=True)
    over = perf.assign(o=perf.get("oversubscribed", False)).groupby(list(SPEED_KEYS))["o"].agg(
        lambda v: bool(v.fillna(False).astype(bool).any()))
    data["oversubscribed"] = [bool(over.get(tuple(r[k] for k in SPEED_KEYS), False)) for r in data.to_dict("records")]
    return with_work(data[cols], perf)


def speed_table(data: pd.DataFrame, perf: pd.DataFrame) -> TableSet:
    """Framework against framework per configuration (`data`: speed_data): epoch-time ratio with its
    interval; `perf`: the performance runs, whose pooled noise the caption names."""
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
        f"{noise_caption(pooled_noise(perf, SCALING_VALUE))} {OVERSUBSCRIBED_TEXT}",
        data, grids, empty_text="No configuration has ok runs of two frameworks.")
