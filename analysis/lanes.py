"""The lanes side by side: each framework's steady-state epoch time on the pair (torch 2.2.1) and
in every lane beside it (scripts/setup.sh) at the points those lanes ran, the lane's speed-up over
the pair, and the PyG/DGL gap with PyG on each lane's torch. A framework a lane cannot import
shows its skipped points with their reason. Runs of the fair harness that stop alike (timing runs
against timing runs) take part.
"""

from __future__ import annotations

import pandas as pd

from analysis import FRAMEWORK_ORDER, framework_label, model_label
from analysis.display import Cell, GridTable, TableSet
from analysis.formatting import fmt_num
from analysis.grouping import performance_runs
from analysis.stats import CI_METHOD_RATIO, mean_ci, ratio_interval, verdict

BASE_LANE = "pair"
POINT_KEYS = ("model", "devices", "batch_size", "workers")
# Compared only with runs that stop alike: a lane's timing runs against the pair's timing runs.
LIKE_KEYS = ("until", "epochs")
COLUMNS = ["model", "devices", "batch_size", "workers", "framework", "lane", "torch", "n_ok", "statuses",
           "reason", "epoch_s", "epoch_ci_s", "speedup_vs_pair", "low", "high", "verdict",
           "other_framework", "over_other_on_pair", "gap_low", "gap_high"]


def lane_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs of the fair harness, each with its lane (runners.result's upgrade gives results from
    before lanes the pair, and from before --harness the fair harness)."""
    if runs.empty or "until" not in runs:
        return runs.iloc[0:0]
    r = performance_runs(runs)
    return r[r["harness"] == "fair"].copy()


def _times(g: pd.DataFrame) -> pd.Series:
    ok = g[g["status"] == "ok"]
    return pd.to_numeric(ok["steady_epoch_mean_s"], errors="coerce").dropna()


def lane_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per point x framework x lane at the points a lane beside the pair ran."""
    r = lane_runs(runs)
    others = sorted(set(r["lane"]) - {BASE_LANE}) if not r.empty else []
    if not others:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    keys = list(POINT_KEYS + LIKE_KEYS)
    for key, g in r[r["lane"].isin(others)].groupby(keys, sort=True):
        here = r[(r[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
        on_pair = {fw: _times(here[(here["framework"] == fw) & (here["lane"] == BASE_LANE)])
                   for fw in FRAMEWORK_ORDER}
        for fw in FRAMEWORK_ORDER:
            # The gap is taken against the other framework on the pair, where both run.
            other = next((f for f in FRAMEWORK_ORDER if f != fw and len(on_pair[f])), None)
            for lane in [BASE_LANE, *others]:
                g2 = here[(here["framework"] == fw) & (here["lane"] == lane)]
                if g2.empty:
                    continue
                rows.append(_row(key, fw, lane, g2, on_pair[fw], other, on_pair.get(other, pd.Series(dtype=float))))
    return pd.DataFrame(rows, columns=COLUMNS)


def _row(key, fw: str, lane: str, g: pd.DataFrame, base: pd.Series, other, other_times: pd.Series) -> dict:
    times = _times(g)
    mean, ci = mean_ci(times)
    est, lo, hi = ratio_interval(base, times) if lane != BASE_LANE else (float("nan"),) * 3
    gap = ratio_interval(times, other_times)
    skipped = g[g["status"] == "skipped"]
    return {**dict(zip(POINT_KEYS, key[:len(POINT_KEYS)])), "framework": fw, "lane": lane,
            "torch": ", ".join(sorted(set(g["env_torch"].dropna().astype(str)))) if "env_torch" in g else "",
            "n_ok": len(times), "statuses": ", ".join(f"{n} {s}" for s, n in g["status"].value_counts().items()),
            "reason": skipped["diag_summary"].iloc[0] if len(skipped) and "diag_summary" in g else "",
            "epoch_s": mean, "epoch_ci_s": ci, "speedup_vs_pair": est, "low": lo, "high": hi,
            "verdict": verdict(lo, hi, 1.0, "faster", "slower") if lane != BASE_LANE else "",
            "other_framework": other, "over_other_on_pair": gap[0], "gap_low": gap[1], "gap_high": gap[2]}


def _ratio_text(est, lo, hi) -> str:
    if pd.isna(est):
        return "n/a"
    return f"{est:.2f}×" + ("" if pd.isna(lo) else f" ({lo:.2f}–{hi:.2f})")


def _cells(row: dict) -> list:
    if not row["n_ok"]:
        text = row["reason"] or row["statuses"]
        return [Cell(text, css="text status status-skipped" if row["reason"] else "text", span=3)]
    time = f"{fmt_num(row['epoch_s'])}" + ("" if pd.isna(row["epoch_ci_s"]) else f" ± {fmt_num(row['epoch_ci_s'])}")
    vs_pair = "—" if row["lane"] == BASE_LANE else _ratio_text(row["speedup_vs_pair"], row["low"], row["high"])
    return [Cell(f"{time} (n={row['n_ok']})"),
            Cell(vs_pair, css="warn" if row["verdict"] == "slower" else "", title=row["verdict"]),
            Cell(_ratio_text(row["over_other_on_pair"], row["gap_low"], row["gap_high"])
                 + (f" vs {framework_label(row['other_framework'])}" if row["other_framework"] else ""))]


def lanes_table(runs: pd.DataFrame) -> TableSet:
    """The lanes table: every framework in every lane at the points a lane beside the pair ran."""
    data = lane_rows(runs)
    header = [[("Model", 1), ("Point", 1), ("Framework", 1), ("Lane (torch)", 1),
               ("Steady epoch time (s), 95% CI", 1), ("Speed-up over the pair", 1),
               ("Epoch time over the other framework's on the pair", 1)]]
    rows = []
    for row in data.to_dict("records"):
        point = f"{row['devices']} dev, batch {row['batch_size']}, {row['workers']} workers"
        rows.append([Cell(model_label(row["model"])), Cell(point), Cell(framework_label(row["framework"])),
                     Cell(f"{row['lane']} ({row['torch'] or '?'})")] + _cells(row))
    grids = [GridTable("", header, rows, n_index=4)] if rows else []
    return TableSet(
        "lanes", "Lanes: the same graph on another torch",
        "Timing runs at the points a lane beside the pair ran (config `lanes`), beside the pair's timing runs "
        "at the same points: the mean steady-state epoch time over repeats; the speed-up of the lane over the "
        f"pair for the same framework; and the epoch time over the other framework's on the pair ({CI_METHOD_RATIO}). "
        "How much of a gap between the frameworks is the torch version shows as the gap with one framework on "
        "each lane's torch and the other on the pair's. A framework "
        "a lane cannot import has its points skipped, with the reason.",
        data, grids, empty_text="Only the pair lane ran. To time PyG on the newest torch beside it, run "
        "`make report LANES=current` (it builds the lane's environment, about 14 min and 2.6 GB on a fresh "
        "machine, then runs the lane's points only).")


def lanes_findings(data: pd.DataFrame) -> list:
    """Per model and framework that ran in a lane: its speed-up over the pair, and its gap to the
    other framework on the pair with both on the pair and with it on the lane's torch."""
    out = []
    ran = data[(data["lane"] != BASE_LANE) & (data["n_ok"] > 0)] if len(data) else data
    for row in ran.to_dict("records"):
        same = data[(data["model"] == row["model"]) & (data["framework"] == row["framework"])]
        pair = same[same["lane"] == BASE_LANE]
        if pair.empty:
            continue
        p = pair.iloc[0]
        fw = framework_label(row["framework"])
        out.append(f"{model_label(row['model'])}, {fw} on torch {row['torch']} ({row['lane']}) against torch "
                   f"{p['torch']} (pair): {_ratio_text(row['speedup_vs_pair'], row['low'], row['high'])} speed-up, "
                   f"{row['verdict']}.")
        if row["other_framework"]:
            other = framework_label(row["other_framework"])
            out.append(f"{fw}'s epoch time over {other}'s on the pair: "
                       f"{_ratio_text(p['over_other_on_pair'], p['gap_low'], p['gap_high'])} with both on the pair, "
                       f"{_ratio_text(row['over_other_on_pair'], row['gap_low'], row['gap_high'])} with {fw} on "
                       f"torch {row['torch']}.")
    skipped = data[(data["n_ok"] == 0) & (data["reason"] != "")] if len(data) else data
    for fw, g in skipped.groupby("framework", sort=False):
        reason = g["reason"].iloc[0].removeprefix("skipped: ")
        out.append(f"{framework_label(fw)} in lane {', '.join(sorted(set(g['lane'])))}: {len(g)} point(s) skipped, "
                   f"every repeat: {reason}.")
    return out
