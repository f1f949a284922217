"""Do both frameworks learn the same: accuracy, convergence and time to accuracy per grid point
of the fixed-schedule runs.
"""

from __future__ import annotations

import pandas as pd

from analysis import GRID_KEYS
from analysis.display import Cell, TableSet
from analysis.formatting import fmt_num
from analysis.tables.grids import flat_grids

KEEP = ["experiment", *GRID_KEYS, "n_runs", "n_ok", "n_converged", "n_not_converged", "n_reached_target",
        "final_val_acc_mean", "final_val_acc_ci95", "baseline_val_acc_mean", "target_val_acc_mean",
        "time_to_target_s_mean", "time_to_target_s_ci95", "epochs_to_target_mean"]


def _accuracy_cell(p) -> Cell:
    m, ci = p["final_val_acc_mean"], p["final_val_acc_ci95"]
    if pd.isna(m):
        return Cell("n/a")
    text = f"{100 * m:.1f}" + ("" if pd.isna(ci) else f" ± {100 * ci:.1f}")
    if p["n_not_converged"] and not p["n_converged"]:
        return Cell(f"{text} (not converged)", css="warn",
                    title="not above the features-only baseline: no accuracy comparison is possible")
    return Cell(text, css="warn" if p["n_not_converged"] else "")


def _converged_cell(p) -> Cell:
    known = p["n_converged"] + p["n_not_converged"]
    if not known:
        return Cell("unknown", css="muted")
    text = "yes" if p["n_converged"] == known else ("not converged" if not p["n_converged"] else
                                                      f"{p['n_converged']} of {known}")
    return Cell(text, css="" if p["n_converged"] == known else "warn")


def _time_to_target_cell(p) -> Cell:
    m, ci = p["time_to_target_s_mean"], p["time_to_target_s_ci95"]
    if pd.isna(p["target_val_acc_mean"]):
        return Cell("no target", css="muted")
    if not p["n_reached_target"]:
        return Cell("not reached", css="warn")
    text = fmt_num(m) + ("" if pd.isna(ci) else f" ± {fmt_num(ci, ref=m)}")
    if p["n_reached_target"] < p["n_ok"]:
        text += f" ({p['n_reached_target']} of {p['n_ok']} reached it)"
    return Cell(text)


COLUMNS = [("repeats (ok / run)", lambda p: Cell(f"{p['n_ok']} / {p['n_runs']}")),
           ("final val acc (%)", _accuracy_cell),
           ("features-only baseline (%)", lambda p: Cell(
               "n/a" if pd.isna(p["baseline_val_acc_mean"]) else f"{100 * p['baseline_val_acc_mean']:.1f}")),
           ("converged", _converged_cell),
           ("target (%)", lambda p: Cell(
               "—" if pd.isna(p["target_val_acc_mean"]) else f"{100 * p['target_val_acc_mean']:.0f}")),
           ("time to target (s)", _time_to_target_cell),
           ("epochs to target", lambda p: Cell(f"{p['epochs_to_target_mean']:.3g}" if p["n_reached_target"]
                                               else "—"))]


def accuracy_table(points: pd.DataFrame) -> TableSet:
    """Accuracy per configuration: repeats, final accuracy with its interval, the features-only
    baseline, convergence and time to the dataset's target accuracy. Runs that stopped when their
    epoch time was known (--until precise) and study-harness runs are left out: accuracy is the
    convergence runs' question."""
    if "until" in points:
        points = points[points["until"].fillna("epochs") != "precise"]
    if "harness" in points:  # the study harness's short schedule is about time and work
        points = points[points["harness"].fillna("fair") != "study"]
    return TableSet(
        "accuracy", "Validation accuracy and time to accuracy (fixed-schedule runs)",
        "Validation accuracy after the last epoch (%, mean ± 95% CI over repeats). A run converged when it beats "
        "the features-only baseline (logistic regression on the node features, same splits); a configuration "
        "whose runs do not is marked 'not converged' and its accuracy is not compared. Time to target: "
        "training time (evaluation excluded) until the first evaluation at or above the dataset's target "
        "accuracy (MLPerf-style; targets in runners/rank/accuracy.py), mean ± 95% CI over the repeats that reached it.",
        points[[c for c in KEEP if c in points]] if not points.empty else points,
        flat_grids(points, COLUMNS, "accuracy"))
