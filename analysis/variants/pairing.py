"""One framework run two ways at the same points: a variant beside its base, and whether the
variant changes the gap to the other framework.

A variant is a value of one run column that is not the base's: a lane beside the pair (another
torch; analysis.variants.lanes), a loader beside the framework's first (DGL's GraphBolt beside its
classic DataLoader; analysis.variants.loaders) or a framework's trimmed layers beside its untrimmed
ones (PyG's trim_to_layer; analysis.variants.trim). At every point a variant ran, each framework gets one row
per variant it ran there: its mean steady-state epoch time, its speed-up over its own base runs,
and its epoch time over the other framework's base runs (the gap, with the variant in place).
Only runs of the fair harness that stop alike (timing runs against timing runs) take part.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import FRAMEWORK_ORDER, framework_label, model_label
from analysis.display import Cell, GridTable, TableSet
from analysis.formatting import fmt_num
from analysis.grouping import performance_runs
from analysis.repeats.noise import SPLIT_AXES, pooled_noise
from analysis.stats import mean_ci, verdict
# The run's epoch time every time comparison of the report reads (speed, scaling, axes, variants).
from analysis.tables.scaling import SCALING_VALUE
from runners.adapters import registry

POINT_KEYS = ("model", "devices", "batch_size", "workers")
# Compared only with runs that stop alike: a variant's timing runs against the base's timing runs.
LIKE_KEYS = ("until", "epochs")
# The column analysis.variants.trim gives the runs: registry.LAYER_TRIM for a run that trimmed its
# layers, TRIM_BASE for the others.
TRIM_COLUMN, TRIM_BASE = "trim_variant", "default"


@dataclass(frozen=True)
class Axis:
    """What varies: the run column, its base value, the column a row's detail comes from (shown
    beside the variant's name), and the words the table and findings use."""
    column: str  # the runs' column that names the variant
    base: str  # its value for the base runs
    detail: str  # the runs' column shown beside the variant (e.g. env_torch); "" for none
    detail_name: str  # that column's name in the rows (e.g. torch)
    named_by_detail: bool = False  # the table names a row by its detail alone (a loader's own name)

    def columns(self) -> list:
        return ["model", "devices", "batch_size", "workers", "framework", self.column, self.detail_name, "n_ok",
                "statuses", "reason", "epoch_s", "epoch_ci_s", f"speedup_vs_{self.base}", "low", "high", "dof", "verdict",
                "other_framework", f"over_other_on_{self.base}", "gap_low", "gap_high", "gap_dof"]


def fair_runs(runs: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """Runs of the fair harness (runners.records.result's upgrade gives a result from before --harness
    the fair harness, and one from before lanes and loaders the pair and the framework's first)."""
    if runs.empty or "until" not in runs:
        return runs.iloc[0:0]
    r = performance_runs(runs)
    r = r[r["harness"] == "fair"]
    # A framework's trimmed runs are a variant of their own (TRIM_COLUMN): not another axis's base.
    return (r if axis.column == TRIM_COLUMN else r[~trimmed(r)]).copy()


def trimmed(runs: pd.DataFrame) -> pd.Series:
    """Whether each run trimmed its layers (the framework's setting, registry.TRIM_SETTINGS);
    False for a framework without one and for results from before the setting."""
    if runs.empty:
        return pd.Series(False, index=runs.index, dtype=bool)
    return runs.apply(registry.trims_layers, axis=1).astype(bool)


def _times(g: pd.DataFrame) -> pd.Series:
    ok = g[g["status"] == "ok"]
    return pd.to_numeric(ok[SCALING_VALUE], errors="coerce").dropna()


def variant_rows(runs: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """One row per point x framework x variant at the points a variant beside the base ran."""
    r = fair_runs(runs, axis)
    others = sorted(set(r[axis.column]) - {axis.base}) if not r.empty else []
    if not others:
        return pd.DataFrame(columns=axis.columns())
    rows = []
    keys = list(POINT_KEYS + LIKE_KEYS)
    # Launch noise pooled over every point of both the base and the variants (split by the
    # variant, or another axis, where Bartlett's test finds the spreads unequal), of the runs that
    # stop as the variants' do: a fixed-schedule (convergence) run at a grid point is not theirs.
    cell_keys = ("experiment", axis.column, "framework", *POINT_KEYS)
    like = r[list(LIKE_KEYS)].astype(str).apply(tuple, axis=1)
    alike = r[like.isin(set(like[r[axis.column].isin(others)]))]
    noise = pooled_noise(alike.assign(experiment="variants"), SCALING_VALUE, cell_keys,
                         (axis.column, *SPLIT_AXES))

    def cell(fw, variant, key):
        return {"experiment": "variants", axis.column: variant, "framework": fw, **dict(zip(POINT_KEYS, key))}

    for key, g in r[r[axis.column].isin(others)].groupby(keys, sort=True):
        here = r[(r[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
        on_base = {fw: _times(here[(here["framework"] == fw) & (here[axis.column] == axis.base)])
                   for fw in FRAMEWORK_ORDER}
        for fw in FRAMEWORK_ORDER:
            # The gap is taken against another framework's base runs, where it has some: the
            # reference's first (registry.REFERENCE_FRAMEWORK), as the report's comparisons are.
            other = next((f for f in sorted(FRAMEWORK_ORDER, key=lambda f: f != registry.REFERENCE_FRAMEWORK)
                          if f != fw and len(on_base[f])), None)
            for variant in [axis.base, *others]:
                g2 = here[(here["framework"] == fw) & (here[axis.column] == variant)]
                if g2.empty:
                    continue
                times = _times(g2)
                other_times = on_base.get(other, pd.Series(dtype=float))
                speedup = (noise.ratio(cell(fw, axis.base, key), cell(fw, variant, key), on_base[fw], times)
                           if variant != axis.base else (float("nan"),) * 4)
                # NaN where either side has no ok run (Noise.ratio falls back to the samples)
                gap = noise.ratio(cell(fw, variant, key), cell(other, axis.base, key), times, other_times)
                rows.append(_row(axis, key, fw, variant, g2, other, speedup, gap))
    return pd.DataFrame(rows, columns=axis.columns())


def _row(axis: Axis, key, fw: str, variant: str, g: pd.DataFrame, other, speedup: tuple, gap: tuple) -> dict:
    """A table row; `speedup`: (est, low, high, dof) of the base over this variant, `gap`: (est, low,
    high, dof) of this variant over the other framework's base (analysis.repeats.noise.Noise.ratio)."""
    times = _times(g)
    mean, ci = mean_ci(times)
    is_base = variant == axis.base
    est, lo, hi, dof = speedup
    skipped = g[g["status"] == "skipped"]
    detail = ", ".join(sorted(set(g[axis.detail].dropna().astype(str)))) if axis.detail in g else ""
    return {**dict(zip(POINT_KEYS, key[:len(POINT_KEYS)])), "framework": fw, axis.column: variant,
            axis.detail_name: detail,
            "n_ok": len(times), "statuses": ", ".join(f"{n} {s}" for s, n in g["status"].value_counts().items()),
            "reason": skipped["diag_summary"].iloc[0] if len(skipped) and "diag_summary" in g else "",
            "epoch_s": mean, "epoch_ci_s": ci, f"speedup_vs_{axis.base}": est, "low": lo, "high": hi, "dof": dof,
            "verdict": verdict(lo, hi, 1.0, "faster", "slower") if not is_base else "",
            "other_framework": other, f"over_other_on_{axis.base}": gap[0], "gap_low": gap[1], "gap_high": gap[2],
            "gap_dof": gap[3]}


def ratio_text(est, lo, hi) -> str:
    if pd.isna(est):
        return "n/a"
    return f"{est:.2f}×" + ("" if pd.isna(lo) else f" ({lo:.2f}–{hi:.2f})")


def _cells(axis: Axis, row: dict) -> list:
    if not row["n_ok"]:
        text = row["reason"] or row["statuses"]
        return [Cell(text, css="text status status-skipped" if row["reason"] else "text", span=3)]
    time = f"{fmt_num(row['epoch_s'])}" + ("" if pd.isna(row["epoch_ci_s"]) else f" ± {fmt_num(row['epoch_ci_s'])}")
    vs_base = "—" if row[axis.column] == axis.base else \
        ratio_text(row[f"speedup_vs_{axis.base}"], row["low"], row["high"])
    return [Cell(f"{time} (n={row['n_ok']})"),
            Cell(vs_base, css="warn" if row["verdict"] == "slower" else "", title=row["verdict"]),
            Cell(ratio_text(row[f"over_other_on_{axis.base}"], row["gap_low"], row["gap_high"])
                 + (f" vs {framework_label(row['other_framework'])}" if row["other_framework"] else ""))]


def variant_table(runs: pd.DataFrame, axis: Axis, key: str, title: str, description: str, empty_text: str,
                  headers: tuple) -> TableSet:
    """The table of variant_rows: `headers` are the variant column's, the speed-up column's and
    the gap column's titles."""
    data = variant_rows(runs, axis)
    variant_h, speedup_h, gap_h = headers
    header = [[("Model", 1), ("Point", 1), ("Framework", 1), (variant_h, 1),
               ("Steady epoch time (s), 95% CI", 1), (speedup_h, 1), (gap_h, 1)]]
    rows = []
    for row in data.to_dict("records"):
        point = f"{row['devices']} dev, batch {row['batch_size']}, {row['workers']} workers"
        name = row[axis.detail_name] if axis.named_by_detail else \
            row[axis.column] + (f" ({row[axis.detail_name] or '?'})" if axis.detail else "")
        rows.append([Cell(model_label(row["model"])), Cell(point), Cell(framework_label(row["framework"])),
                     Cell(name)] + _cells(axis, row))
    grids = [GridTable("", header, rows, n_index=4)] if rows else []
    return TableSet(key, title, description, data, grids, empty_text=empty_text)
