"""Where a training step's time goes, and the steady state: the breakdown and throughput tables,
one row per grid point.
"""

from __future__ import annotations

import pandas as pd

from analysis import GRID_KEYS, PHASE_COLUMNS, PHASE_LABELS
from analysis.display import Cell, TableSet
from analysis.formatting import fmt_num, fmt_pct, fmt_si
from analysis.tables.grids import flat_grids

TIMED_TO_STARTUP_WARN = 5.0  # training time below 5x the start-up: the run is too short to mean much


def breakdown_table(points: pd.DataFrame) -> TableSet:
    """Mean time per training step split into phases, and the loader's share."""
    phase_cols = [f"step_{p}" for p in PHASE_COLUMNS]
    def ms(col):
        return lambda p: Cell(fmt_num(1000 * p[f"{col}_mean"]) if not pd.isna(p[f"{col}_mean"]) else "n/a")
    def share(p):
        total = p["step_s_mean"]
        return Cell(fmt_pct(p["step_load_wait_s_mean"] / total) if total and not pd.isna(total) else "n/a")
    columns = [(f"{PHASE_LABELS[ph]} (ms)", ms(f"step_{ph}")) for ph in PHASE_COLUMNS]
    columns += [("whole step (ms)", ms("step_s")), ("loader share", share)]
    keep = ["experiment", *GRID_KEYS, "n_ok"] + [f"{c}_mean" for c in phase_cols + ["step_s"]]
    return TableSet(
        "breakdown", "Where a training step's time goes",
        "Mean time per training step (milliseconds, averaged over all steps of all ranks, then over "
        "repeats) split into phases. The backward phase includes DDP's gradient all-reduce. "
        "Loader share = time waiting for the next mini-batch / whole step. GPU runs show n/a unless "
        "they ran with --breakdown on: CUDA work is asynchronous, so phase times taken without a "
        "synchronisation at every phase edge would be CPU launch times, and they are not recorded.",
        points[keep] if not points.empty else points, flat_grids(points, columns, "breakdown"))


def throughput_table(points: pd.DataFrame) -> TableSet:
    """Steady-state and warm-up epoch, rates, start-up and its ratio to the timed part."""
    def rate(col):
        def cell(p):
            m, ci = p[f"{col}_mean"], p[f"{col}_ci95"]
            return Cell(fmt_si(m) + ("" if pd.isna(ci) else f" ± {fmt_si(ci)}"))
        return cell

    def steady(p):
        m, ci = p["steady_epoch_time_s_mean"], p["steady_epoch_time_s_ci95"]
        if pd.isna(m):
            return Cell("n/a", css="muted", title="no epoch after the warm-up epoch")
        return Cell(fmt_num(m) + ("" if pd.isna(ci) else f" ± {fmt_num(ci, ref=m)}"))

    columns = [("steady-state epoch (s)", steady),
               ("epoch CV", lambda p: Cell(fmt_pct(p["steady_epoch_cv_mean"]))),
               ("warm-up epoch (s)", lambda p: Cell(fmt_num(p["warmup_epoch_time_s_mean"]))),
               ("steps / epoch", lambda p: Cell(fmt_num(p["steps_per_epoch_mean"]))),
               ("seed nodes / s", rate("throughput_seed_nodes_per_s")),
               ("sampled edges / s †", rate("sampled_edges_per_s")),
               ("start-up (s)", lambda p: Cell(fmt_num(p["startup_s_mean"]))),
               ("timed / start-up", lambda p: Cell(
                   "n/a" if pd.isna(p["timed_to_startup_ratio_mean"]) else f"{p['timed_to_startup_ratio_mean']:.1f}×",
                   css="warn" if p["timed_to_startup_ratio_mean"] < TIMED_TO_STARTUP_WARN else ""))]
    values = ("steady_epoch_time_s", "steady_epoch_cv", "warmup_epoch_time_s", "steps_per_epoch",
              "throughput_seed_nodes_per_s", "sampled_edges_per_s", "median_epoch_time_s", "startup_s",
              "timed_to_startup_ratio")
    keep = ["experiment", *GRID_KEYS, "n_ok"] + [f"{c}_{s}" for c in values for s in ("mean", "ci95")]
    return TableSet(
        "throughput", "Steady state, warm-up and throughput",
        "Steady-state epoch time: the median epoch time (slowest rank) after the first epoch, which is "
        "reported apart as warm-up (loader start, first touch of the graph, lazy initialisation); mean ± 95% "
        "CI over repeats, and the mean coefficient of variation of the steady epochs within a run. Seed nodes "
        "per second by all processes together over the whole training time. † Sampled edges mean different "
        "things in the two frameworks (PyG: edges of the sampled subgraph, once; DGL: the sum over layers' "
        "blocks, a node's neighbours counted once per layer): compare them within a framework only. Start-up "
        f"is the time before the first step (not training time); timed / start-up below "
        f"{TIMED_TO_STARTUP_WARN:.0f}× is highlighted: such runs measure mostly start-up effects.",
        points[[c for c in keep if c in points]] if not points.empty else points, flat_grids(points, columns, "throughput"))
