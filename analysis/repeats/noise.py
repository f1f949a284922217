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

Blocks: the sweep launches one model's configurations of one repeat together (both frameworks
of a configuration back to back), so a drift of the machine (outside load, a warmer or busier
host) shifts a whole block of runs. Within each pool, log epoch time is fitted as
cell effect + block effect (block: repeat x model), by least squares. A comparison's interval
then rests on the noise left within the blocks, on n - rank degrees of freedom, and its estimate
is the cells' difference with the blocks' shifts taken out (on a balanced design, the plain ratio
of geometric means). Where the machine did not drift, the block effects are near zero and little
changes; where it did, the comparisons inside a block no longer pay for it. A comparison the
model cannot estimate (its cells in different pools) falls back to each pool's spread without
blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import GRID_KEYS
from analysis.stats import ratio_interval_dof
from runners.rank.stopping import t_quantile

CELL_KEYS = ("experiment", *GRID_KEYS)
SPLIT_AXES = ("framework", "workers", "devices", "batch_size", "model")
# The runs the sweep launches together (workflows/rules/common.smk: interleaved_order).
BLOCK_KEYS = ("repeat", "model")
SPLIT_P = 0.01
MAX_DEPTH = 2
MIN_DOF = 4
METHOD = ("pooled launch noise: log epoch time fitted as configuration + block (repeat x model) over the "
          "configurations of an experiment (pools split where Bartlett's test finds their spreads unequal); "
          "the noise left within the blocks gives a 95% t-interval on the log scale")


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
    fit: "BlockFit | None" = None

    def label(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.where.items()) or "all configurations"

    def holds(self, key: tuple, cell_keys: tuple) -> bool:
        """Whether the cell `key` (laid out as `cell_keys`) is in this group."""
        return all(key[cell_keys.index(k)] == v for k, v in self.where.items())


def _cell_runs(runs: pd.DataFrame, value: str, cell_keys: tuple) -> dict:
    """{cell key tuple: ([log values], [block keys])} of the ok runs with a positive `value`; a run
    without the block columns is a block of its own."""
    if runs is None or runs.empty or value not in runs:
        return {}
    ok = runs[(runs["status"] == "ok")]
    vals = pd.to_numeric(ok[value], errors="coerce")
    ok = ok[vals > 0].assign(_log=vals[vals > 0].map(math.log))
    if ok.empty or not set(cell_keys) <= set(ok.columns):
        return {}
    has_blocks = set(BLOCK_KEYS) <= set(ok.columns)
    out = {}
    for key, g in ok.groupby(list(cell_keys), sort=False, dropna=False):
        blocks = ([tuple(str(v) for v in b) for b in g[list(BLOCK_KEYS)].itertuples(index=False, name=None)]
                  if has_blocks else [("run", i) for i in g.index])
        out[key] = (list(g["_log"]), blocks)
    return out


@dataclass
class BlockFit:
    """Least-squares fit of log values = cell + block over one pool's runs: what a comparison of
    two of its cells is, with the noise left within the blocks (`sd` on `dof`)."""
    cells: list
    coef: np.ndarray
    xtx_pinv: np.ndarray
    projector: np.ndarray
    sd: float
    dof: int

    def contrast(self, a, b):
        """(log a - log b with the blocks' shifts out, its standard error, dof); None when the
        design cannot tell the two cells apart from the blocks."""
        return self.combination({a: 1.0, b: -1.0})

    def combination(self, weights: dict):
        """(sum of weight x log cell with the blocks' shifts out, its standard error, dof) of
        {cell: weight} (weights summing to 0); None where a cell is missing or the design cannot
        estimate it apart from the blocks."""
        if any(cell not in self.cells for cell in weights) or self.dof <= 0:
            return None
        c = np.zeros(len(self.coef))
        for cell, w in weights.items():
            c[self.cells.index(cell)] += w
        if not np.allclose(self.projector @ c, c, atol=1e-8):
            return None
        return float(c @ self.coef), float(self.sd * math.sqrt(max(c @ self.xtx_pinv @ c, 0.0))), self.dof

    def ratio(self, weights: dict):
        """(ratio, low, high, dof): combination(weights) back on the time scale, with its 95%
        interval; None where the combination has none."""
        got = self.combination(weights)
        if got is None:
            return None
        d, se, dof = got
        h = t_quantile(dof) * se
        return math.exp(d), math.exp(d - h), math.exp(d + h), dof


def _design(cell_blocks: dict) -> tuple:
    """(cells, X) of {cell: [block of each run]}: one row per run, a column per cell and per block."""
    cells = list(cell_blocks)
    blocks = sorted({b for bs in cell_blocks.values() for b in bs})
    rows = []
    for i, bs in enumerate(cell_blocks.values()):
        for b in bs:
            x = np.zeros(len(cells) + len(blocks))
            x[i], x[len(cells) + blocks.index(b)] = 1.0, 1.0
            rows.append(x)
    return cells, np.array(rows)


def _fit(cell_blocks: dict, y=None):
    """BlockFit of the design {cell: [block of each run]} with values `y` in the same order (None:
    no values, `sd` 1); None where the design leaves no degrees of freedom."""
    cells, X = _design(cell_blocks)
    if not len(X):
        return None
    dof = len(X) - int(np.linalg.matrix_rank(X))
    if dof <= 0:
        return None
    pinv = np.linalg.pinv(X)
    if y is None:
        coef, sd = np.zeros(X.shape[1]), 1.0
    else:
        coef = pinv @ y
        sd = math.sqrt(float(((y - X @ coef) ** 2).sum()) / dof)
    return BlockFit(cells, coef, np.linalg.pinv(X.T @ X), pinv @ X, sd, dof)


def design_fit(cell_blocks: dict):
    """The block design of {cell: [block of each run]} without values: a BlockFit whose `sd` is 1,
    so contrast() gives a comparison's standard error in units of the noise SD (analysis.repeats.second_round
    projects a planned design with it); None where it leaves no degrees of freedom."""
    return _fit(cell_blocks)


def fit_blocks(cell_runs: dict):
    """BlockFit of {cell: (logs, blocks)}, or None where it leaves no degrees of freedom."""
    return _fit({cell: bs for cell, (_, bs) in cell_runs.items()},
                np.array([v for logs, _ in cell_runs.values() for v in logs]))


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


def split(experiment: str, cells: dict, cell_keys: tuple, axes: tuple = SPLIT_AXES) -> list:
    """The groups one experiment's `cells` ({cell key: logs}, keys laid out as `cell_keys`) pool
    into: one, or split by `axes` where Bartlett's test finds the spreads unequal (the
    report's rule, which analysis.repeats.second_round follows too)."""
    return _split(experiment, cells, {}, 0, cell_keys, axes)


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

    def ratio(self, key_a: dict, key_b: dict, a, b) -> tuple:
        """(ratio, low, high, dof) of cell `key_a` over cell `key_b` (their values `a` and `b`):
        from the pool's block fit where both cells are in it, else stats.ratio_interval_dof with
        each pool's spread (Welch on the samples without one)."""
        ka, kb = (tuple(k.get(c) for c in self.cell_keys) for k in (key_a, key_b))
        g = self.of_cell.get(ka)
        if g is not None and g is self.of_cell.get(kb) and g.fit is not None:
            got = g.fit.ratio({ka: 1.0, kb: -1.0})
            if got is not None:
                return got
        return ratio_interval_dof(a, b, self.pair(key_a, key_b))

    def describe(self) -> pd.DataFrame:
        """One row per pool: experiment, group, cells, dof, SD (log scale), Bartlett's p, and the
        SD left within the blocks with its dof (NaN without a block fit)."""
        cols = ["experiment", "group", "cells", "dof", "sd_log", "bartlett_p", "sd_within_blocks", "dof_within_blocks"]
        return pd.DataFrame([{"experiment": g.experiment, "group": g.label(), "cells": g.cells, "dof": g.dof,
                              "sd_log": g.sd, "bartlett_p": g.p_equal,
                              "sd_within_blocks": g.fit.sd if g.fit else float("nan"),
                              "dof_within_blocks": g.fit.dof if g.fit else float("nan")} for g in self.groups],
                            columns=cols)


def pooled_noise(runs: pd.DataFrame, value: str, cell_keys: tuple = CELL_KEYS, axes: tuple = SPLIT_AXES) -> Noise:
    """The pooled launch noise of `value` over the ok runs (performance runs only: the caller's
    selection), per experiment (the first of `cell_keys`), grouped where the spreads differ (by
    `axes`, columns of `cell_keys`)."""
    cell_runs = _cell_runs(runs, value, cell_keys)
    by_exp = {}
    for key, (logs, _) in cell_runs.items():
        by_exp.setdefault(key[0], {})[key] = logs
    groups, of_cell = [], {}
    for exp, exp_cells in by_exp.items():
        for g in split(exp, exp_cells, cell_keys, axes):
            members = [key for key in exp_cells if g.holds(key, cell_keys)]
            g.fit = fit_blocks({key: cell_runs[key] for key in members})
            groups.append(g)
            for key in members:
                of_cell[key] = g
    return Noise(value, groups, of_cell, cell_keys)


def caption(noise: Noise) -> str:
    """One sentence naming the pools behind a table's intervals: their spread and degrees of freedom."""
    groups = [g for g in noise.groups if g.dof > 0]
    if not groups:
        return "No configuration has two ok repeats, so no launch noise could be pooled."
    many = len({g.experiment for g in groups}) > 1
    parts = [f"{g.experiment + ': ' if many else ''}{g.label()} SD {g.sd:.3f} ({g.dof} dof, {g.cells} configurations)"
             + (f", {g.fit.sd:.3f} within the repeat blocks ({g.fit.dof} dof)" if g.fit else "")
             for g in groups]
    split = any(g.where for g in groups)
    return ("Launch noise (SD of log epoch time between launches), pooled: " + "; ".join(parts) + "."
            + (f" Pools are split where Bartlett's test finds unequal spreads (p < {SPLIT_P})." if split else "")
            + (" A block is one repeat of one model, launched together; the intervals use the noise within them."
               if any(g.fit for g in groups) else ""))
