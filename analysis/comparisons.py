"""Framework against framework per configuration: which pairs have ok runs (each framework
against the reference, runners.adapters.registry.REFERENCE_FRAMEWORK), the ratio or the difference
of one value with its 95% interval, and the verdict labels that name the faster or higher framework.
"""

from __future__ import annotations

import pandas as pd

from analysis import FRAMEWORK_ORDER, framework_label
from runners.adapters import registry
from analysis.grouping import paper_order
from analysis.repeats.noise import pooled_noise
from analysis.stats import verdict, welch_interval


def framework_pairs(runs: pd.DataFrame) -> list:
    """(framework, reference) for every other framework with ok runs, in the registry's order
    (registry.reference_pairs: the declared reference, or the first framework present without it)."""
    present = set(runs.loc[runs["status"] == "ok", "framework"]) if not runs.empty else set()
    return registry.reference_pairs(present)


def comparison_labels(pair, kind: str = "ratio") -> tuple:
    """Verdict labels of a comparison of pair (a, b): (below-1/above-0 side, other side)."""
    la, lb = (framework_label(f) for f in pair)
    return (f"{lb} faster", f"{la} faster") if kind == "ratio" else (f"{la} higher", f"{lb} higher")


def framework_comparison(runs: pd.DataFrame, value: str, kind: str = "ratio", pair=None) -> pd.DataFrame:
    """Framework a against framework b (`pair`, default the registry's first framework against the reference) per
    experiment and configuration, from the ok runs' `value`.

    kind "ratio": a / b (for times: above 1 means b is faster); "diff": a - b.
    A ratio's interval rests on the launch noise pooled over the experiment's configurations
    (analysis.repeats.noise); `dof` is its degrees of freedom.
    Columns: experiment, model, devices, batch_size, workers, n_a, n_b, estimate, low, high, dof,
    verdict (comparison_labels, or "no clear difference")."""
    pair = tuple(pair or registry.reference_pairs(FRAMEWORK_ORDER)[0])
    keys = ["experiment", "model", "devices", "batch_size", "workers"]
    cols = keys + ["n_a", "n_b", "estimate", "low", "high", "dof", "verdict"]
    ok = runs[(runs["status"] == "ok")] if not runs.empty else runs
    if ok.empty or value not in ok:
        return pd.DataFrame(columns=cols)
    high_side, low_side = comparison_labels(pair, kind)
    noise = pooled_noise(ok, value) if kind == "ratio" else None
    out = []
    for key, g in ok.groupby(keys, sort=False):
        a = g.loc[g["framework"] == pair[0], value].dropna()
        b = g.loc[g["framework"] == pair[1], value].dropna()
        if a.empty or b.empty:
            continue
        if kind == "ratio":
            cell = dict(zip(keys, key))
            est, lo, hi, dof = noise.ratio({**cell, "framework": pair[0]}, {**cell, "framework": pair[1]}, a, b)
            v = verdict(lo, hi, 1.0, high_side, low_side)
        else:
            est, lo, hi = welch_interval(a, b)
            dof = float("nan")
            v = verdict(lo, hi, 0.0, high_side, low_side)
        out.append({**dict(zip(keys, key)), "n_a": len(a), "n_b": len(b), "estimate": est, "low": lo,
                    "high": hi, "dof": dof, "verdict": v})
    return paper_order(pd.DataFrame(out, columns=cols), ["experiment", "model", "devices", "batch_size", "workers"])
