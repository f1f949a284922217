"""The layouts the report's tables share: the seed study's Table 2 (rows model x devices x
workers, columns batch size x framework) and the flat one (a row per grid point).
"""

from __future__ import annotations

import pandas as pd

from analysis import FRAMEWORK_ORDER, framework_label, model_label
from analysis.display import Cell, GridTable, index_cells, row_anchor, value_cell
from analysis.formatting import fmt_num
from analysis.grouping import paper_order


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
