"""The lanes side by side: each framework's steady-state epoch time on the pair (torch 2.2.1) and
in every lane beside it (scripts/setup.sh) at the points those lanes ran, the lane's speed-up over
the pair, and the PyG/DGL gap with PyG on each lane's torch. A framework a lane cannot import
shows its skipped points with their reason. Runs of the fair harness that stop alike (timing runs
against timing runs) take part (analysis.variants.pairing).
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.display import TableSet
from analysis.stats import CI_METHOD_RATIO
from analysis.variants.pairing import Axis, ratio_text, variant_table

BASE_LANE = "pair"
AXIS = Axis("lane", BASE_LANE, "env_torch", "torch")


def lanes_table(runs: pd.DataFrame) -> TableSet:
    """The lanes table: every framework in every lane at the points a lane beside the pair ran."""
    return variant_table(
        runs, AXIS, "lanes", "Lanes: the same graph on another torch",
        "Timing runs at the points a lane beside the pair ran (config `lanes`), beside the pair's timing runs "
        "at the same points: the mean steady-state epoch time over repeats; the speed-up of the lane over the "
        f"pair for the same framework; and the epoch time over the other framework's on the pair ({CI_METHOD_RATIO}). "
        "How much of a gap between the frameworks is the torch version shows as the gap with one framework on "
        "each lane's torch and the other on the pair's. A framework "
        "a lane cannot import has its points skipped, with the reason.",
        "Only the pair lane ran. To time PyG on the newest torch beside it, run "
        "`make report LANES=current` (it builds the lane's environment, about 14 min and 2.6 GB on a fresh "
        "machine, then runs the lane's points only).",
        ("Lane (torch)", "Speed-up over the pair", "Epoch time over the other framework's on the pair"))


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
                   f"{p['torch']} (pair): {ratio_text(row['speedup_vs_pair'], row['low'], row['high'])} speed-up, "
                   f"{row['verdict']}.")
        if row["other_framework"]:
            other = framework_label(row["other_framework"])
            out.append(f"{fw}'s epoch time over {other}'s on the pair: "
                       f"{ratio_text(p['over_other_on_pair'], p['gap_low'], p['gap_high'])} with both on the pair, "
                       f"{ratio_text(row['over_other_on_pair'], row['gap_low'], row['gap_high'])} with {fw} on "
                       f"torch {row['torch']}.")
    skipped = data[(data["n_ok"] == 0) & (data["reason"] != "")] if len(data) else data
    for fw, g in skipped.groupby("framework", sort=False):
        reason = g["reason"].iloc[0].removeprefix("skipped: ")
        out.append(f"{framework_label(fw)} in lane {', '.join(sorted(set(g['lane'])))}: {len(g)} point(s) skipped, "
                   f"every repeat: {reason}.")
    return out
