"""Statistics of repeated measurements: a mean with its 95% t-interval, the difference and the
ratio of two samples with a 95% Welch t-interval, and the verdict an interval supports. Numbers
in, numbers out; the t quantiles are the stop rule's (runners.stopping), so the runs and the
analysis compute their intervals alike.
"""

from __future__ import annotations

import math

import pandas as pd

from runners.stopping import t_quantile

CI_METHOD_RATIO = ("ratio of geometric means over repeats, 95% Welch t-interval on the log scale")
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
    a, b = _clean(a), _clean(b)
    if not a or not b:
        return float("nan"), float("nan"), float("nan")
    d = sum(a) / len(a) - sum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return d, float("nan"), float("nan")
    va, vb = pd.Series(a).var(ddof=1) / len(a), pd.Series(b).var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    h = t_quantile(dof) * se
    return d, d - h, d + h


def ratio_interval(a, b) -> tuple:
    """(ratio, low, high): geometric mean of `a` over that of `b` with a 95% interval (Welch t
    on the logs, so the interval is multiplicative, as timing noise is). NaN bounds below 2
    repeats per side."""
    a, b = [v for v in _clean(a) if v > 0], [v for v in _clean(b) if v > 0]
    d, lo, hi = welch_interval([math.log(v) for v in a], [math.log(v) for v in b])
    return tuple(math.exp(x) if not pd.isna(x) else float("nan") for x in (d, lo, hi))


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
