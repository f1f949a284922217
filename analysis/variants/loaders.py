"""A framework's other loaders beside its first: DGL's GraphBolt pipeline beside its classic
DataLoader (config `loaders`), at the points the other loader ran. Per point: each loader's
steady-state epoch time, the other loader's epoch time over the first's, and the gap to the
other framework with either loader, so that the report can say whether the loader changes
which framework is faster (analysis.variants.pairing).
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.display import TableSet
from analysis.grouping import paper_order
from analysis.stats import CI_METHOD_RATIO, over_configurations
from analysis.variants.pairing import Axis, variant_rows, variant_table

BASE = "default"  # aggregate's loader_variant of a framework's first loader
AXIS = Axis("loader_variant", BASE, "loader", "loader", named_by_detail=True)
NEITHER = "neither"


def loader_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per point x framework x loader at the points another loader ran."""
    return variant_rows(runs, AXIS)


def loaders_table(runs: pd.DataFrame) -> TableSet:
    """The loaders table: each framework with each loader at the points another loader ran."""
    return variant_table(
        runs, AXIS, "loaders", "Loaders: GraphBolt beside DGL's classic DataLoader",
        "Timing runs at the points a framework's other loader ran (config `loaders`), beside the timing runs of "
        "its first loader at the same points (DGL: the classic `dgl.dataloading.DataLoader`; its other, "
        "`graphbolt`, is the pipeline of DGL's own multi-GPU examples since 2.1): the mean steady-state epoch "
        "time over repeats; the speed-up of the loader over the framework's first; and the epoch time over "
        f"the other framework's first loader ({CI_METHOD_RATIO}). Both loaders take the same seeds per rank "
        "and epoch, the same fan-outs and the same model (the fairness table).",
        "No other loader ran. Add `loaders: {compare: [graphbolt], ...}` to the config (the default sweep has "
        "it) to time DGL's GraphBolt pipeline beside its classic DataLoader.",
        ("Loader", "Speed-up over the framework's first loader", "Epoch time over the other framework's"))


def _other_rows(data: pd.DataFrame) -> pd.DataFrame:
    """The rows of loaders other than a framework's first that have ok runs."""
    return data[(data["loader_variant"] != BASE) & (data["n_ok"] > 0)] if len(data) else data


def _base_of(data: pd.DataFrame, row: dict) -> dict | None:
    keys = ["model", "devices", "batch_size", "workers", "framework"]
    same = data[(data[keys] == pd.Series({k: row[k] for k in keys})).all(axis=1) & (data["loader_variant"] == BASE)]
    return same.iloc[0].to_dict() if len(same) else None


def _faster(est, lo, hi, fw: str, other: str) -> str:
    """Which framework a gap (fw's epoch time over other's) says is faster, or neither."""
    if pd.isna(lo) or pd.isna(hi) or lo <= 1 <= hi:
        return NEITHER
    return framework_label(other if lo > 1 else fw)


def _verdict_change(before: str, after: str, first: str, name: str) -> str:
    """Whether the faster framework (or neither) is the same with either loader."""
    if before == after:
        return ("neither framework is clearly faster with either loader" if before == NEITHER
                else f"the verdict holds: {before} faster with either loader")
    if NEITHER in (before, after):
        clear, open_ = (first, name) if after == NEITHER else (name, first)
        return (f"the verdict is open with {open_}: {before if after == NEITHER else after} faster with "
                f"{clear}, no clear difference with {open_}")
    return f"the verdict changes: {before} faster with {first}, {after} with {name}"


def _over(est, lo, hi) -> str:
    """A speed-up turned into the other loader's epoch time over the first's, with its interval."""
    if pd.isna(est):
        return "n/a"
    return f"{1 / est:.2f}×" + ("" if pd.isna(lo) else f" (95% CI {1 / hi:.2f}–{1 / lo:.2f})")


def _gap(row: dict) -> str:
    est, lo, hi = row["over_other_on_default"], row["gap_low"], row["gap_high"]
    if pd.isna(est):
        return "n/a"
    return f"{est:.2f}×" + ("" if pd.isna(lo) else f" ({lo:.2f}–{hi:.2f})")


def loader_answer_parts(data: pd.DataFrame, intervals: list | None = None) -> list:
    """The answer's parts (text, href): per model, the other loader's epoch time over the first's at
    the middle point, how many points are clear, and whether the framework verdict changes.
    `intervals`: where given, each model's geometric-mean interval is appended to it
    (analysis.report.answers.Answer.intervals)."""
    other = _other_rows(data)
    if other.empty:
        return [("Not measured: no other loader ran beside a framework's first (config loaders).", "#loaders")]
    parts = []
    for model, g in paper_order(other, ["model"]).groupby("model", sort=False):
        g = g.assign(over=1 / g["speedup_vs_default"]).sort_values("over", kind="stable")
        r = g.iloc[(len(g) - 1) // 2].to_dict()
        base = _base_of(data, r)
        fw, name = framework_label(r["framework"]), r["loader"]
        first = base["loader"] if base else "its first loader"
        slower = int((g["verdict"] == "slower").sum())
        faster = int((g["verdict"] == "faster").sum())
        # The geometric mean over the configurations, with its own interval (as the other answers).
        est, lo, hi = over_configurations(g[["speedup_vs_default", "low", "high", "dof"]].itertuples(index=False,
                                                                                                    name=None))
        if intervals is not None:
            intervals.append({"what": f"{model_label(model)} {name} / {first}", "estimate": 1 / est if est else est,
                              "low": 1 / hi if hi else hi, "high": 1 / lo if lo else lo, "points": 2 * len(g),
                              "answer": (name, model)})
        where = "in its one configuration" if len(g) == 1 else (
            f"(geometric mean of {len(g)} configurations: {g['over'].iloc[0]:.2f}×–{g['over'].iloc[-1]:.2f}×)")
        parts += [(f"{model_label(model)}: {fw}'s epoch time with {name} is ", None),
                  (_over(est, lo, hi), "#loaders"),
                  (f" its {first} loader's {where}; slower in {slower}, faster in {faster} of {len(g)}. ", None)]
        if base and r["other_framework"]:
            o = r["other_framework"]
            before = _faster(base["over_other_on_default"], base["gap_low"], base["gap_high"], r["framework"], o)
            after = _faster(r["over_other_on_default"], r["gap_low"], r["gap_high"], r["framework"], o)
            verdict = _verdict_change(before, after, first, name)
            parts.append((f"Against {framework_label(o)}, {verdict} ({fw} / {framework_label(o)} epoch time "
                          f"{_gap(base)} with {first}, {_gap(r)} with {name}). ", None))
    return parts


def loaders_findings(data: pd.DataFrame) -> list:
    """One line per point where another loader ran: its speed-up over the first, and the gap to
    the other framework with each loader."""
    out = []
    for row in _other_rows(data).to_dict("records"):
        base = _base_of(data, row)
        point = f"{row['devices']} dev, batch {row['batch_size']}, {row['workers']} workers"
        line = (f"{model_label(row['model'])}, {point}: {framework_label(row['framework'])}'s epoch time with "
                f"{row['loader']} is {_over(row['speedup_vs_default'], row['low'], row['high'])} its "
                f"{base['loader'] if base else 'first'} loader's ({row['verdict']})")
        if base and row["other_framework"]:
            line += (f"; over {framework_label(row['other_framework'])}: {_gap(base)} with {base['loader']}, "
                     f"{_gap(row)} with {row['loader']}")
        out.append(line + ".")
    return out
