"""A framework's trimmed layers beside its untrimmed ones: PyG with trim_to_layer (config `trim`)
beside PyG's untrimmed runs and the other framework's runs at the same points. Per point: each
one's steady-state epoch time, trimming's speed-up over the untrimmed runs, and the gap to the
other framework with and without trimming, every interval from one launch noise pooled over
those runs (analysis.variants.pairing), so that the report can say how much of the gap trimming
closes. Which framework can trim, and what its trimming is called, is the registry's
(Framework.layer_trim).
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.display import TableSet
from analysis.grouping import adapter_choice, paper_order
from analysis.report.sections import trim_axis
from analysis.stats import CI_METHOD_RATIO, over_configurations
from analysis.variants.pairing import (POINT_KEYS, TRIM_BASE, TRIM_COLUMN, Axis, fair_runs, trimmed, variant_rows,
                                       variant_table)
from runners.adapters import registry

TRIMMED = registry.LAYER_TRIM
EDGES = "step_layer_edges"  # runs.csv: the edge updates of a step (the work table's unit, analysis.tables.work)
# The detail column: how the run's layers computed, and with which sampler (its adapter's choices).
AXIS = Axis(TRIM_COLUMN, TRIM_BASE, "layers", "layers", named_by_detail=True)


def with_trim(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the frameworks' first loaders, with TRIM_COLUMN (TRIMMED or TRIM_BASE) and
    `layers`: how each run's layers computed and its sampler, as its adapter recorded them."""
    if runs.empty or "framework" not in runs:
        return runs.assign(**{TRIM_COLUMN: [], "layers": []})
    r = runs[runs["loader_variant"] == "default"] if "loader_variant" in runs else runs
    on = trimmed(r)
    can = r["framework"].isin(list(registry.TRIM_SETTINGS))
    # results without adapter choices say what the setting says
    layers = [" · ".join(str(v) for v in (c or _fallback(t, k), sampler) if v)
              for c, sampler, t, k in zip(adapter_choice(r, "layer_compute"), adapter_choice(r, "sampler"), on, can)]
    return r.assign(**{TRIM_COLUMN: on.map({True: TRIMMED, False: TRIM_BASE}), "layers": layers})


def _fallback(trims: bool, can: bool) -> str:
    return "trimmed" if trims else "untrimmed" if can else "the framework's own (no trimming switch)"


def trim_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per point x framework x trimming at the points a trimmed run ran (pairing.variant_rows),
    with `edges_over_other`: its edge updates per step over the other framework's untrimmed runs'."""
    r = with_trim(runs)
    return _with_edges(r, variant_rows(r, AXIS))


def _with_edges(r: pd.DataFrame, data: pd.DataFrame) -> pd.DataFrame:
    return data.assign(edges_over_other=_edges_over_other(fair_runs(r, AXIS), data)) if len(data) else data


def _edges_over_other(r: pd.DataFrame, data: pd.DataFrame) -> list:
    """Each row's mean edge updates per step (ok runs) over the other framework's base runs' (NaN:
    results from before the work columns)."""
    if EDGES not in r:
        return [float("nan")] * len(data)
    ok = r[r["status"] == "ok"]
    means = pd.to_numeric(ok[EDGES], errors="coerce").groupby(
        [ok[k] for k in (*POINT_KEYS, "framework", TRIM_COLUMN)]).mean()

    def get(row, fw, variant):
        return means.get(tuple(row[k] for k in POINT_KEYS) + (fw, variant), float("nan"))

    return [get(row, row["framework"], row[TRIM_COLUMN]) / get(row, row["other_framework"], TRIM_BASE)
            for row in data.to_dict("records")]


def trim_table(runs: pd.DataFrame) -> TableSet:
    """The trimmed runs beside the untrimmed ones and the other framework's at the same points."""
    names = ", ".join(f"{f.label}'s {f.layer_trim_label}" for f in registry.FRAMEWORKS.values() if f.layer_trim)
    r = with_trim(runs)
    table = variant_table(
        r, AXIS, "trim", f"Trimmed layers: {names} beside the untrimmed runs",
        "Timing runs at the points config `trim` names, with the framework's layer trimming on (each layer "
        "computes only on the nodes the next layers still need), beside its untrimmed timing runs and the "
        "other framework's at the same points: the mean steady-state epoch time over repeats; trimming's "
        "speed-up over the untrimmed runs; and the epoch time over the other framework's "
        f"({CI_METHOD_RATIO}). Each row names how its layers "
        "computed and its sampler, as the run's adapter recorded them.",
        "No trimmed run. Add `trim: {devices: [1, 2], batch_size: 1024, workers: 0, repeats: 2}` to the config "
        f"(the default sweep has it) to time {names} beside its untrimmed runs.",
        ("Layers", "Speed-up over untrimmed", "Epoch time over the other framework's"))
    # the first screen reads this table's rows (first_screen.Frames.trim): they carry the work too
    table.data = _with_edges(r, table.data)
    return table


def _combined(g: pd.DataFrame, cols: list) -> tuple:
    return over_configurations(g[cols].itertuples(index=False, name=None))


def _gm_over_base(data: pd.DataFrame, g: pd.DataFrame) -> float:
    """The untrimmed runs' gap to the other framework at the trimmed rows' points (geometric mean)."""
    keys = ["model", "devices", "batch_size", "workers", "framework"]
    base = data[data[TRIM_COLUMN] == TRIM_BASE].merge(g[keys], on=keys)
    return _combined(base, ["over_other_on_default", "gap_low", "gap_high", "gap_dof"])[0]


def trim_parts(data: pd.DataFrame, intervals: list | None = None) -> list:
    """One sentence (text, href parts) per the trim rows `data` (trim_rows): per model, the trimmed
    framework's epoch time over the other's and by how much trimming cuts its epoch, each the
    geometric mean over the configurations with its 95% interval; [] without trimmed ok runs.
    `intervals`: where given, each model's trimmed-over-untrimmed interval is appended to it, keyed
    as the second round plans it ((TRIMMED, model): analysis.report.sections), and its trimmed-over-
    the-other-framework interval ((sections.trim_axis(framework), model) where the other is the reference)."""
    rows = data[(data[TRIM_COLUMN] == TRIMMED) & (data["n_ok"] > 0)] if len(data) else data
    if rows.empty:
        return []
    parts, first = [], True
    for model, g in paper_order(rows, ["model"]).groupby("model", sort=False):
        fw = registry.framework(g["framework"].iloc[0])
        other = next(iter(g["other_framework"].dropna()), None)
        est, lo, hi = _combined(g, ["speedup_vs_default", "low", "high", "dof"])
        gap = _combined(g, ["over_other_on_default", "gap_low", "gap_high", "gap_dof"])
        work = g["edges_over_other"].dropna() if "edges_over_other" in g else pd.Series(dtype=float)
        work = f" at {(work.prod() ** (1 / len(work))):.2f}× its edge updates per step" if len(work) else ""
        if intervals is not None:
            intervals.append({"what": f"{model_label(model)} {fw.label} trimmed / untrimmed",
                              "estimate": 1 / est if est else est, "low": 1 / hi if hi else hi,
                              "high": 1 / lo if lo else lo, "points": 2 * len(g), "answer": (TRIMMED, model)})
            if other is not None and not pd.isna(gap[0]):
                intervals.append({"what": f"{model_label(model)} {fw.label} trimmed / {framework_label(other)}",
                                  "estimate": gap[0], "low": gap[1], "high": gap[2], "points": 2 * len(g),
                                  "answer": (trim_axis(fw.name), model) if other == registry.REFERENCE_FRAMEWORK
                                  else None})
        lead = (f"With {fw.layer_trim_label} ({len(g)} configuration{'s' if len(g) > 1 else ''} a model): "
                if first else "; ")
        first = False
        parts.append((f"{lead}{model_label(model)}: ", None))
        if other is not None and not pd.isna(gap[0]):
            parts += [(f"{fw.label} takes ", None), (f"{gap[0]:.2f}×", "#table-trim"),
                      (f" as long as {framework_label(other)}{_ci(*gap)}{work}{_against(_gm_over_base(data, g))}, "
                       "and ", None)]
        parts += [(f"trimming cuts {fw.label}'s epoch by ", None), (_cut(est, lo, hi), "#table-trim")]
    return parts + [(". ", None)]


def _against(untrimmed: float) -> str:
    return "" if pd.isna(untrimmed) else f", against {untrimmed:.2f}× untrimmed"


def _ci(est, lo, hi) -> str:
    return "" if pd.isna(lo) else f" (95% CI {lo:.2f}–{hi:.2f})"


def _cut(est, lo, hi) -> str:
    """The epoch's cut in percent from a speed-up (untrimmed over trimmed) and its interval."""
    if pd.isna(est) or not est:
        return "n/a (no untrimmed run at its points)"
    text = f"{100 * (1 - 1 / est):.0f} %"
    if pd.isna(lo):
        return text
    low, high = 100 * (1 - 1 / lo), 100 * (1 - 1 / hi)
    # a negative end (trimming may lengthen the epoch) reads badly beside an en dash
    return text + f" (95% CI {low:.0f}{' to ' if low < 0 else '–'}{high:.0f} %)"
