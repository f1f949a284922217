"""Launch noise pooled over the configurations of an experiment.

A timing run's epoch time varies from launch to launch. With 2 launches a side, a comparison's
own Welch interval has 1-2 degrees of freedom and its width is luck. The spread between launches
on the log scale is a property of the machine and the harness more than of one configuration, so
it is estimated once from every configuration's repeats: the pooled variance
sum((n_i - 1) s_i^2) / sum(n_i - 1) over the cells (one cell: experiment x framework x model x
devices x batch size x workers), on tens of degrees of freedom.

Pooling is checked, not assumed: Bartlett's test asks whether the cells of a pool share one
variance. Where they do not (p < SPLIT_P), the pool is split by the grid axis whose levels differ
most in spread (framework, workers, devices, ...), and each part is checked again, down to
MAX_DEPTH splits; a part is never made so small that it has fewer than MIN_DOF degrees of freedom.
The groups, their spread and what the test said are reported (`describe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis import GRID_KEYS

CELL_KEYS = ("experiment", *GRID_KEYS)
SPLIT_AXES = ("framework", "workers", "devices", "batch_size", "model")
SPLIT_P = 0.01
MAX_DEPTH = 2
MIN_DOF = 4
METHOD = ("pooled launch noise: log epoch time's variance between launches pooled over the "
          "configurations of an experiment (grouped where Bartlett's test finds their spreads unequal), "
          "95% t-interval on the log scale")


@dataclass
class Group:
    """One pool: the cells it covers (`where`: axis -> level, empty for the whole experiment),
    its pooled SD of log values, degrees of freedom, and Bartlett's p across its cells."""
    experiment: str
    where: dict
    sd: float
    dof: int
    cells: int
    p_equal: float

    def label(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.where.items()) or "all configurations"


def _cell_logs(runs: pd.DataFrame, value: str, cell_keys: tuple) -> dict:
    """{cell key tuple: [log values]} of the ok runs with a positive `value`."""
    if runs is None or runs.empty or value not in runs:
        return {}
    ok = runs[(runs["status"] == "ok")]
    vals = pd.to_numeric(ok[value], errors="coerce")
    ok = ok[vals > 0].assign(_log=vals[vals > 0].map(math.log))
    if ok.empty or not set(cell_keys) <= set(ok.columns):
        return {}
    return {key: list(g["_log"]) for key, g in ok.groupby(list(cell_keys), sort=False, dropna=False)}


def pooled_variance(samples: list) -> tuple:
    """(pooled variance, dof) of lists of log values; cells of one value add nothing."""
    ss = dof = 0.0
    for s in samples:
        if len(s) >= 2:
            m = sum(s) / len(s)
            ss += sum((x - m) ** 2 for x in s)
            dof += len(s) - 1
    return (ss / dof if dof else float("nan")), int(dof)


def bartlett_p(samples: list) -> float:
    """Bartlett's test that the lists share one variance: its p-value (1.0 with fewer than two
    lists of two or more values, or with no spread at all)."""
    from scipy import stats

    usable = [s for s in samples if len(s) >= 2]
    if len(usable) < 2:
        return 1.0
    var, dof = pooled_variance(usable)
    if not var > 0 or any(pd.Series(s).var(ddof=1) == 0 for s in usable):
        return 1.0
    return float(stats.bartlett(*usable).pvalue)


def _split(exp: str, cells: dict, where: dict, depth: int, cell_keys: tuple, axes: tuple) -> list:
    """The groups of `cells` ({key: logs}) under `where`: one pool, or split by the axis whose
    levels differ most in spread (smallest Bartlett p between the levels' pooled samples)."""
    samples = list(cells.values())
    var, dof = pooled_variance(samples)
    p = bartlett_p(samples)
    whole = [Group(exp, dict(where), math.sqrt(var) if var == var else float("nan"), dof, len(cells), p)]
    if p >= SPLIT_P or depth >= MAX_DEPTH:
        return whole
    best = None
    for axis in axes:
        if axis in where:
            continue
        i = cell_keys.index(axis)
        parts = {}
        for key, logs in cells.items():
            parts.setdefault(key[i], {})[key] = logs
        if len(parts) < 2 or any(pooled_variance(list(c.values()))[1] < MIN_DOF for c in parts.values()):
            continue
        # Spread between the levels: each level's cells centred on their own means, pooled.
        centred = [[x - sum(s) / len(s) for s in c.values() if len(s) >= 2 for x in s] for c in parts.values()]
        between = bartlett_p(centred)
        if best is None or between < best[0]:
            best = (between, axis, parts)
    if best is None or best[0] >= SPLIT_P:
        return whole
    _, axis, parts = best
    out = []
    for level, sub in parts.items():
        out += _split(exp, sub, {**where, axis: level}, depth + 1, cell_keys, axes)
    return out


@dataclass
class Noise:
    """Pooled launch noise of one value: its groups, and which group each cell belongs to."""
    value: str
    groups: list
    of_cell: dict
    cell_keys: tuple = CELL_KEYS

    def sd_dof(self, key: dict):
        """(SD, dof) of the pool that holds the cell `key` (CELL_KEYS -> level); None when the cell
        has no ok run or its pool has no degrees of freedom."""
        g = self.of_cell.get(tuple(key.get(k) for k in self.cell_keys))
        return (g.sd, g.dof) if g is not None and g.dof > 0 else None

    def pair(self, key_a: dict, key_b: dict):
        """(sd_a, dof_a, sd_b, dof_b) for stats.ratio_interval, or None if either side has none."""
        a, b = self.sd_dof(key_a), self.sd_dof(key_b)
        return (*a, *b) if a and b else None

    def describe(self) -> pd.DataFrame:
        """One row per pool: experiment, group, cells, dof, SD (log scale), Bartlett's p."""
        return pd.DataFrame([{"experiment": g.experiment, "group": g.label(), "cells": g.cells, "dof": g.dof,
                              "sd_log": g.sd, "bartlett_p": g.p_equal} for g in self.groups],
                            columns=["experiment", "group", "cells", "dof", "sd_log", "bartlett_p"])


def pooled_noise(runs: pd.DataFrame, value: str, cell_keys: tuple = CELL_KEYS, axes: tuple = SPLIT_AXES) -> Noise:
    """The pooled launch noise of `value` over the ok runs (performance runs only: the caller's
    selection), per experiment (the first of `cell_keys`), grouped where the spreads differ (by
    `axes`, columns of `cell_keys`)."""
    cells = _cell_logs(runs, value, cell_keys)
    by_exp = {}
    for key, logs in cells.items():
        by_exp.setdefault(key[0], {})[key] = logs
    groups, of_cell = [], {}
    for exp, exp_cells in by_exp.items():
        for g in _split(exp, exp_cells, {}, 0, cell_keys, axes):
            groups.append(g)
            for key in exp_cells:
                if all(key[cell_keys.index(k)] == v for k, v in g.where.items()):
                    of_cell[key] = g
    return Noise(value, groups, of_cell, cell_keys)


def caption(noise: Noise) -> str:
    """One sentence naming the pools behind a table's intervals: their spread and degrees of freedom."""
    groups = [g for g in noise.groups if g.dof > 0]
    if not groups:
        return "No configuration has two ok repeats, so no launch noise could be pooled."
    many = len({g.experiment for g in groups}) > 1
    parts = [f"{g.experiment + ': ' if many else ''}{g.label()} SD {g.sd:.3f} ({g.dof} dof, {g.cells} configurations)"
             for g in groups]
    split = any(g.where for g in groups)
    return ("Launch noise (SD of log epoch time between launches), pooled: " + "; ".join(parts) + "."
            + (f" Pools are split where Bartlett's test finds unequal spreads (p < {SPLIT_P})." if split else ""))
