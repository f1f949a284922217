"""Plan the next sweep from this one: how many repeats and epochs each configuration needs.

Two levels of noise, measured separately (Kalibera and Jones, "Rigorous benchmarking in
reasonable time", ISMM 2013): between launches (repeats: a new process tree, new memory layout,
other load) and within a launch (epochs of one run). For one configuration with r runs of n
steady epochs each:

    var(configuration mean) = tau2 / r + sigma2 / (r n)

sigma2 is the within-run variance of steady epoch times (mean over the runs), tau2 the
between-launch variance of the run means less the part the within-run noise explains. A launch
costs c_launch seconds (start-up, warm-up epoch, validation, teardown: the run's wall time less
its steady epochs) and an epoch c_epoch seconds. The cheapest plan for a given precision trains
n* = sqrt(c_launch sigma2 / (c_epoch tau2)) epochs per launch (the caps bound it) and as many
launches as the target needs; with tau2 = 0 one launch could do, but repeats stay >= 2 so an
interval exists. Three repeats give rough variance estimates: the plan is a starting point.
"""

from __future__ import annotations

import math

import pandas as pd

from runners.rank.stopping import t_quantile

PLAN_PRECISION = 0.03  # relative 95% half-width wanted for each configuration's mean epoch time
PLAN_KEYS = ("experiment", "framework", "model", "devices", "batch_size", "workers")
MAX_REPEATS = 50


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(float("nan"), index=df.index)


def variance_components(g: pd.DataFrame) -> dict:
    """sigma2, tau2, the costs and the precision reached for the ok runs `g` of one configuration."""
    mean = _num(g, "steady_epoch_mean_s")
    n = _num(g, "steady_epochs")
    cv = _num(g, "steady_epoch_cv")
    ok = mean.notna() & n.gt(1) & cv.notna()
    mean, n, cv = mean[ok], n[ok], cv[ok]
    r = len(mean)
    if r == 0:
        return {}
    grand = float(mean.mean())
    sigma2 = float(((cv * mean) ** 2).mean())
    between = float(mean.var(ddof=1)) if r > 1 else float("nan")
    tau2 = max(0.0, between - sigma2 / float(n.mean())) if r > 1 else float("nan")
    wall = _num(g, "wall_time_s")[ok]
    c_launch = float((wall - n * mean).clip(lower=0).mean())
    reached = t_quantile(r - 1) * math.sqrt(between / r) / grand if r > 1 and grand > 0 else float("nan")
    return {"runs": r, "epoch_s": grand, "within_cv": math.sqrt(sigma2) / grand,
            "between_cv": math.sqrt(tau2) / grand if r > 1 else float("nan"),
            "sigma2": sigma2, "tau2": tau2, "launch_s": c_launch, "epochs_used": float(n.median() + 1),
            "precision_now": reached, "cost_now_s": float(wall.sum())}


def plan(c: dict, precision: float = PLAN_PRECISION, min_epochs: int = 4, max_epochs: int = 50) -> dict:
    """Epochs per launch, launches and seconds that reach `precision` for one configuration."""
    if not c or pd.isna(c.get("tau2")):
        return {"plan_epochs": None, "plan_repeats": None, "plan_cost_s": None}
    sigma2, tau2, grand = c["sigma2"], c["tau2"], c["epoch_s"]
    if tau2 > 0 and c["epoch_s"] > 0:
        n = math.ceil(math.sqrt(c["launch_s"] * sigma2 / (c["epoch_s"] * tau2)))
    else:
        n = max_epochs  # no launch-to-launch noise measured: epochs are the cheaper lever
    n = min(max(n, min_epochs), max_epochs)
    for r in range(2, MAX_REPEATS + 1):
        if t_quantile(r - 1) * math.sqrt((tau2 + sigma2 / n) / r) / grand <= precision:
            break
    else:
        return {"plan_epochs": n, "plan_repeats": None, "plan_cost_s": None}
    return {"plan_epochs": n, "plan_repeats": r, "plan_cost_s": r * (c["launch_s"] + (n + 1) * c["epoch_s"])}


def plan_data(runs: pd.DataFrame, precision: float = PLAN_PRECISION) -> pd.DataFrame:
    """One row per timing configuration: measured variance components and the plan."""
    cols = [*PLAN_KEYS, "runs", "epochs_used", "epoch_s", "within_cv", "between_cv", "launch_s",
            "precision_now", "cost_now_s", "plan_epochs", "plan_repeats", "plan_cost_s"]
    if runs.empty or "until" not in runs:
        return pd.DataFrame(columns=cols)
    timing = runs[(runs["status"] == "ok") & (runs["until"] == "precise")]
    rows = []
    for key, g in timing.groupby(list(PLAN_KEYS), sort=False):
        c = variance_components(g)
        if c:
            caps = _num(g, "epochs")
            rows.append({**dict(zip(PLAN_KEYS, key)), **c,
                         **plan(c, precision, max_epochs=int(caps.max()) if caps.notna().any() else 50)})
    return pd.DataFrame(rows, columns=cols)
