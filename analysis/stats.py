"""Statistics of repeated measurements: a mean with its 95% t-interval, the difference and the
ratio of two samples with a 95% Welch t-interval, and the verdict an interval supports. Numbers
in, numbers out; the t quantiles are the stop rule's (runners.rank.stopping), so the runs and the
analysis compute their intervals alike.
"""

from __future__ import annotations

import math

import pandas as pd

from runners.rank.stopping import t_quantile

CI_METHOD_RATIO = ("ratio of geometric means over repeats, 95% t-interval on the log scale with the launch noise "
                   "pooled over the experiment's configurations, grouped where their spreads differ")
CI_METHOD_WELCH = "ratio of geometric means over repeats, 95% Welch t-interval on the log scale"
CI_METHOD_DIFF = "difference of means over repeats, 95% Welch t-interval"
NO_CLEAR = "no clear difference"


def _clean(values) -> list:
    """The values as floats, missing ones (None, NaN) dropped."""
    return [float(v) for v in values if v is not None and not pd.isna(v)]


def mean_ci(values) -> tuple:
    """(mean, 95% CI half-width by the t-distribution; NaN for fewer than 2 values)."""
    vals = _clean(values)
    if not vals:
        return float("nan"), float("nan")
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, float("nan")
    sd = pd.Series(vals).std(ddof=1)
    return m, float(t_quantile(len(vals) - 1) * sd / math.sqrt(len(vals)))


def welch_interval(a, b) -> tuple:
    """(mean(a) - mean(b), low, high) with a 95% Welch t-interval; NaN bounds when either
    side has fewer than 2 values (no interval can be given)."""
    return _welch(a, b)[:3]


def _welch(a, b) -> tuple:
    """welch_interval's (difference, low, high) and its degrees of freedom (NaN without an interval)."""
    a, b = _clean(a), _clean(b)
    if not a or not b:
        return (float("nan"),) * 4
    d = sum(a) / len(a) - sum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return d, float("nan"), float("nan"), float("nan")
    va, vb = pd.Series(a).var(ddof=1) / len(a), pd.Series(b).var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d, float("inf")
    dof = _satterthwaite(va, len(a) - 1, vb, len(b) - 1)
    h = t_quantile(dof) * se
    return d, d - h, d + h, dof


def _satterthwaite(va: float, dof_a: float, vb: float, dof_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference whose sides' variances of the mean
    are `va` and `vb`, estimated on `dof_a` and `dof_b` degrees of freedom."""
    return (va + vb) ** 2 / ((va ** 2 / dof_a if va else 0) + (vb ** 2 / dof_b if vb else 0))


def noise_dof(sd_a: float, dof_a: float, va: float, sd_b: float, dof_b: float, vb: float) -> float:
    """Degrees of freedom of a difference whose sides take pooled launch noise (SD, dof) each, with
    variances of the mean `va` and `vb`: one pool serving both sides is one estimate with its own
    dof; two pools combine by Welch-Satterthwaite."""
    if (sd_a, dof_a) == (sd_b, dof_b) or not va + vb:
        return dof_a
    return _satterthwaite(va, dof_a, vb, dof_b)


def _pooled_difference(a: list, b: list, sd_a: float, dof_a: float, sd_b: float, dof_b: float) -> tuple:
    """(mean(a) - mean(b), low, high, dof): a 95% interval whose spread comes from pooled launch
    noise (each side's SD and its degrees of freedom, analysis.repeats.noise), not from the samples
    themselves, so one value a side is enough. Welch-Satterthwaite combines the sides' dof."""
    d = sum(a) / len(a) - sum(b) / len(b)
    va, vb = sd_a ** 2 / len(a), sd_b ** 2 / len(b)
    if va + vb == 0:
        return d, d, d, float("inf")
    dof = noise_dof(sd_a, dof_a, va, sd_b, dof_b, vb)
    h = t_quantile(dof) * math.sqrt(va + vb)
    return d, d - h, d + h, dof


def ratio_interval_dof(a, b, noise=None) -> tuple:
    """ratio_interval's (ratio, low, high) and the interval's degrees of freedom (NaN without one)."""
    a, b = [v for v in _clean(a) if v > 0], [v for v in _clean(b) if v > 0]
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    if not la or not lb:
        return (float("nan"),) * 4
    d, lo, hi, dof = _pooled_difference(la, lb, *noise) if noise else _welch(la, lb)
    return (*(math.exp(x) if not pd.isna(x) else float("nan") for x in (d, lo, hi)), dof)


def ratio_interval(a, b, noise=None) -> tuple:
    """(ratio, low, high): geometric mean of `a` over that of `b` with a 95% interval on the logs
    (multiplicative, as timing noise is). `noise`: (sd_a, dof_a, sd_b, dof_b), the pooled launch
    noise of each side on the log scale (analysis.repeats.noise.Noise.pair); without it, Welch t on the
    samples' own spread, with NaN bounds below 2 repeats per side."""
    return ratio_interval_dof(a, b, noise)[:3]


def over_configurations(rows) -> tuple:
    """combined_ratio of `rows`; where no row has an interval, the plain geometric mean of their
    ratios, with NaN bounds."""
    rows = list(rows)
    est, lo, hi = combined_ratio(rows)
    if pd.isna(est):
        logs = [math.log(r) for r, *_ in rows if r == r and r > 0]
        est = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    return est, lo, hi


def combined_ratio(rows) -> tuple:
    """(geometric mean ratio, low, high) over configurations: the mean of their log ratios with
    a 95% interval. `rows`: (ratio, low, high, dof) per configuration. Each configuration's
    standard error is read back from its interval (half-width / t(dof)); launches of different
    configurations are independent, so the variances add. The configurations' intervals share
    one pooled noise estimate, so the smallest of their dof is kept (not their sum)."""
    rows = [(math.log(r), (math.log(h) - math.log(lo)) / 2, dof) for r, lo, h, dof in rows
            if all(x == x and x > 0 for x in (r, lo, h, dof))]
    if not rows:
        return float("nan"), float("nan"), float("nan")
    k = len(rows)
    mean = sum(r for r, _, _ in rows) / k
    se = math.sqrt(sum((half / t_quantile(dof)) ** 2 for _, half, dof in rows)) / k
    h = t_quantile(min(dof for _, _, dof in rows)) * se
    return math.exp(mean), math.exp(mean - h), math.exp(mean + h)


def verdict(low: float, high: float, null: float, above: str, below: str) -> str:
    """`above` when the whole interval lies above `null`, `below` when below it, else
    "no clear difference" (also when there is no interval: a single repeat proves nothing)."""
    if pd.isna(low) or pd.isna(high):
        return NO_CLEAR
    if low > null:
        return above
    if high < null:
        return below
    return NO_CLEAR


def middle(df: pd.DataFrame, col: str):
    """The row at the middle of `col`'s range (the lower middle for an even count), as a dict: the
    configuration a first-screen sentence quotes."""
    ordered = df.sort_values(col, kind="stable")
    return ordered.iloc[(len(ordered) - 1) // 2].to_dict()
