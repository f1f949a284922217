"""Where the missing speed-up goes: the gap between a multi-device point's measured epoch time
and ideal scaling, split into measured parts.

The base is the fewest devices of the point's scaling series (tables.scaling.scaling_data). Over the
steady epochs (the warm-up epochs excluded) of the slowest rank, as the suite reports epoch times,
the base has mean epoch time T1, steps per epoch S1 and per-step phase times l1 (loader wait),
p1 (batch preparation), c1 (copy), f1 (forward), b1 (backward with DDP's all-reduce), o1
(optimizer), t1 their sum; the point with N times the base's devices has T_N, S_N, l_N ... b_N.
Ideal = T1 / N, gap = T_N - T1 / N, and

    extra steps      (S_N - S1/N) t1                     more than 1/N of the base's batches
    loader wait      S_N (l_N - l1)
    compute          S_N ((p+c+f+o)_N - (p+c+f+o)_1) + S_N b1 (f_N/f1 - 1)
                                                         the backward's compute slows as the forward did
    all-reduce/wait  S_N (b_N - b1 f_N/f1)               what the backward gained beyond that
    unexplained      gap - the four above

The four parts sum to S_N t_N - S1 t1 / N (the b1 f_N/f1 terms cancel), so unexplained is
(T_N - S_N t_N) - (T1 - S1 t1) / N: time in the epoch outside the steps at N devices against the
base's share of it, plus noise. It is a residual, so the parts and it sum to the gap exactly.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis import PHASE_COLUMNS, framework_label, model_label
from analysis.display import frame_table, row_anchor
from analysis.formatting import fmt_duration
from analysis.grouping import add_experiment, performance_points, performance_runs
from analysis.tables.scaling import scaling_data
from runners.rank.stopping import WARMUP_EPOCHS

SERIES = ("experiment", "framework", "model", "batch_size", "series_workers")
PARTS = ("extra_steps", "loader_wait", "compute", "allreduce_wait", "unexplained")
PART_LABELS = {
    "extra_steps": "extra steps",
    "loader_wait": "loader wait",
    "compute": "compute contention",
    "allreduce_wait": "gradient all-reduce and waiting for the slowest rank",
    "unexplained": "unexplained (outside the steps, noise)",
}
# Short names for table headers and the figure's legend.
PART_SHORT = {"extra_steps": "extra steps", "loader_wait": "loader wait", "compute": "compute contention",
              "allreduce_wait": "all-reduce + waiting", "unexplained": "unexplained"}
VALUES = ("base_epoch_s", "epoch_s", "ideal_s", "gap_s", "speedup", "ideal_speedup", "base_steps", "steps")
COLUMNS = [*SERIES, "workers", "devices", "base_devices", "n_runs", "base_n_runs", *VALUES,
           *(f"{p}_s" for p in PARTS), *(f"{p}_share" for p in PARTS), "reason"]
NO_PHASES = ("no phase times in its steps (a CUDA run without --breakdown records none: its phases "
             "would be asynchronous launch times)")


# -- per run: the slowest rank of each steady epoch ---------------------------------------------

def timing_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs whose epochs are split: performance runs of the fair harness (the seed study's
    harness and fault-injection demonstrations are left out), labelled with their experiment."""
    if runs.empty:
        return runs.assign(experiment=pd.Series(dtype="object"))
    # Labelled before filtering, so the experiments read as in the report's other tables.
    runs = runs if "experiment" in runs else add_experiment(runs)
    runs = performance_runs(runs)
    harness = runs["harness"].fillna("fair") if "harness" in runs else pd.Series("fair", index=runs.index)
    return runs[harness == "fair"]


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as numbers (CSV cells may be text or empty), rank and epoch as whole numbers so the
    epochs and the steps join on them; rows without them dropped."""
    df = df.apply(lambda c: c if c.name == "run_id" else pd.to_numeric(c, errors="coerce"))
    df = df.dropna(subset=["run_id", "rank", "epoch"])
    return df.astype({"rank": "int64", "epoch": "int64"})


def slowest_epochs(epochs: pd.DataFrame) -> pd.DataFrame:
    """(run_id, epoch, rank, time_s) of the slowest rank of every steady epoch."""
    e = _keyed(epochs.reindex(columns=["run_id", "epoch", "rank", "time_s"])).dropna()
    e = e[e["epoch"] >= WARMUP_EPOCHS]  # the warm-up carries one-off costs, outside the steady state
    if e.empty:
        return e
    return e.loc[e.groupby(["run_id", "epoch"])["time_s"].idxmax()]


def epoch_steps(slowest: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per run and steady epoch: its time, the slowest rank's step count and summed phase times;
    `phased` is False where a step of it has no phase times."""
    s = _keyed(steps.reindex(columns=["run_id", "rank", "epoch", *PHASE_COLUMNS]))
    s["phased"] = s[list(PHASE_COLUMNS)].notna().all(axis=1)
    sums = s.groupby(["run_id", "rank", "epoch"]).agg(
        steps=("epoch", "size"), phased=("phased", "all"), **{p: (p, "sum") for p in PHASE_COLUMNS}).reset_index()
    out = slowest.merge(sums, on=["run_id", "rank", "epoch"], how="left")
    out["steps"] = out["steps"].fillna(0)
    out["phased"] = out["phased"].eq(True) & (out["steps"] > 0)
    return out


def run_profiles(epochs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per run: mean over its steady epochs of the epoch time (T), steps (S) and per-epoch phase
    sums, and whether every such epoch has phase times."""
    slowest = slowest_epochs(epochs)
    if slowest.empty:
        return pd.DataFrame(columns=["run_id", "T", "S", *PHASE_COLUMNS, "phased"])
    per = epoch_steps(slowest, steps).rename(columns={"time_s": "T", "steps": "S"})
    return per.groupby("run_id").agg(T=("T", "mean"), S=("S", "mean"), phased=("phased", "all"),
                                     **{p: (p, "mean") for p in PHASE_COLUMNS}).reset_index()


# -- per point: the profile of its repeats and the split --------------------------------------

def point_profile(profiles: pd.DataFrame, run_ids) -> tuple:
    """(profile, None) or (None, reason): T, S and the mean per-step time of every phase over the
    point's runs (each run weighs alike); per-step times are mean per-epoch sums over mean steps,
    so S times a phase is that phase's time per epoch."""
    p = profiles[profiles["run_id"].isin(list(run_ids))]
    if p.empty:
        return None, "no steady epoch (a run needs at least 2 epochs: the first is the warm-up)"
    if not (p["S"] > 0).all():
        return None, "no step rows of the slowest rank in a steady epoch"
    if not p["phased"].all():
        return None, NO_PHASES
    m = p[["T", "S", *PHASE_COLUMNS]].mean()
    return {"T": m["T"], "S": m["S"], **{ph: m[ph] / m["S"] for ph in PHASE_COLUMNS}, "n": len(p)}, None


def split_gap(base: dict, point: dict, n: float) -> dict:
    """The gap of `point` (N = n times the base's devices) to ideal scaling of `base`, in seconds
    per epoch, and its parts (see the module's docstring); profiles as from point_profile."""
    t1 = sum(base[ph] for ph in PHASE_COLUMNS)
    rest = [ph for ph in PHASE_COLUMNS if ph not in ("load_wait_s", "backward_s")]  # p, c, f, o
    slowdown = point["forward_s"] / base["forward_s"]  # the backward's compute slows as the forward did
    s_n = point["S"]
    ideal = base["T"] / n
    parts = {
        "extra_steps": (s_n - base["S"] / n) * t1,
        "loader_wait": s_n * (point["load_wait_s"] - base["load_wait_s"]),
        "compute": s_n * (sum(point[ph] for ph in rest) - sum(base[ph] for ph in rest))
        + s_n * base["backward_s"] * (slowdown - 1),
        "allreduce_wait": s_n * (point["backward_s"] - base["backward_s"] * slowdown),
    }
    gap = point["T"] - ideal
    parts["unexplained"] = gap - sum(parts.values())
    return {"base_epoch_s": base["T"], "epoch_s": point["T"], "ideal_s": ideal, "gap_s": gap,
            "speedup": base["T"] / point["T"], "ideal_speedup": n, "base_steps": base["S"], "steps": s_n,
            **{f"{k}_s": v for k, v in parts.items()},
            # Shares of a gap that is not there (at or beyond ideal scaling) would mean nothing.
            **{f"{k}_share": v / gap if gap > 0 else math.nan for k, v in parts.items()}}


def _point_runs(runs: pd.DataFrame, row, devices, workers) -> pd.Series:
    sel = (runs["status"] == "ok") & (runs["devices"] == devices) & (runs["workers"] == workers)
    for k in ("experiment", "framework", "model", "batch_size"):
        sel &= runs[k] == row[k]
    return runs.loc[sel, "run_id"]


def _split_row(runs, profiles, row, base_workers) -> dict:
    """One multi-device point of scaling_data: its split, or the reason it has none."""
    out = {k: row[k] for k in (*SERIES, "workers", "devices", "base_devices")}
    ids = {"point": _point_runs(runs, row, row["devices"], row["workers"]),
           "base": _point_runs(runs, row, row["base_devices"], base_workers)}
    out.update(n_runs=len(ids["point"]), base_n_runs=len(ids["base"]))
    profile = {}
    for side, label in (("base", f"the base ({row['base_devices']} devices)"), ("point", "this point")):
        if ids[side].empty:
            return {**out, "reason": f"no ok run at {label}"}
        profile[side], why = point_profile(profiles, ids[side])
        if why:
            return {**out, "reason": f"{label}: {why}"}
    if not profile["base"]["forward_s"] > 0:
        return {**out, "reason": "the base's forward time is zero: no compute slow-down to scale the backward by"}
    return {**out, **split_gap(profile["base"], profile["point"], row["devices"] / row["base_devices"]),
            "reason": None}


def gap_data(runs: pd.DataFrame, epochs: pd.DataFrame, steps: pd.DataFrame,
             scaling: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per multi-device point of every scaling series (ok timing runs only): the series
    keys, devices, T1, T_N, ideal, gap, each part in seconds per epoch and as a share of the gap,
    the runs counted, and `reason` where the point cannot be split (no phase times, no ok run,
    no steady epoch). Missing data gives reasons, never an error. `scaling`: scaling_data of all the
    performance runs, where the caller has it (its series of the timing runs' experiments are these)."""
    runs = timing_runs(runs)
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    if scaling is None:
        scaling = scaling_data(performance_points(runs), runs)
    else:  # the harness is an experiment setting, so the timing runs' series are whole experiments
        scaling = scaling[scaling["experiment"].isin(set(runs["experiment"]))]
    profiles = run_profiles(epochs, steps)
    rows = []
    for _, series in scaling.groupby(list(SERIES), sort=False):
        base_workers = series.loc[series["devices"] == series["base_devices"], "workers"].iloc[0]
        for _, row in series[series["devices"] > series["base_devices"]].iterrows():
            rows.append(_split_row(runs, profiles, row, base_workers))
    return pd.DataFrame(rows, columns=COLUMNS)


# -- in words and as a table -------------------------------------------------------------------

fmt_time = fmt_duration  # seconds in a human unit: '1.23 s', '412 ms', '-35.0 ms'


def _share(v) -> str:
    return "n/a" if pd.isna(v) else f"{100 * v:.0f}%"


def _devices(n) -> str:
    return f"{n:g} device{'s' if n != 1 else ''}"


def gap_sentence(r: dict, parts: int = 2) -> str:
    """The point's missing speed-up in words, its `parts` largest parts: '2 devices are 1.30× faster
    than 1, not 2×: of the 0.40 s missing per epoch, 55% is compute contention, ...' (the table
    has every part)."""
    who = (f"{framework_label(r['framework'])} {model_label(r['model'])}, batch {r['batch_size']} per process, "
           f"{r['workers']} loader worker{'s' if r['workers'] != 1 else ''}")
    head = f"{_devices(r['devices'])} against {r['base_devices']:g}"
    if r.get("reason"):
        return f"{who}: the missing speed-up of {head} cannot be split: {r['reason']}."
    faster = (f"are {r['speedup']:.2f}× faster than {r['base_devices']:g}" if r["speedup"] >= 1
              else f"are slower than {r['base_devices']:g} ({r['speedup']:.2f}×)")
    lead = f"{who}: {_devices(r['devices'])} {faster}"
    if not r["gap_s"] > 0:  # shares of no gap mean nothing; the largest parts in seconds still show why
        big = sorted(PARTS, key=lambda p: -abs(r[f"{p}_s"]))[:parts]
        return (f"{lead}, at or beyond the ideal {r['ideal_speedup']:g}×: no speed-up is missing (largest parts: "
                + ", ".join(f"{PART_SHORT[p]} {fmt_time(r[f'{p}_s'])}" for p in big) + ").")
    taken = [f"{_share(r[f'{p}_share'])} is {PART_LABELS[p]}" for p in sorted(PARTS, key=lambda p: -r[f"{p}_s"])
             if r[f"{p}_s"] >= 0][:parts]
    return f"{lead}, not {r['ideal_speedup']:g}×: of the {fmt_time(r['gap_s'])} missing per epoch, " + \
        ", ".join(taken) + "."


def gap_findings(gap: pd.DataFrame) -> list:
    """One sentence per multi-device point that could be split (gap_data rows), then one per
    reason the others could not."""
    split = gap[gap["reason"].isna()] if len(gap) else gap
    out = [gap_sentence(r) for r in split.to_dict("records")]
    for reason, g in (gap.dropna(subset=["reason"]).groupby("reason", sort=False) if len(gap) else []):
        out.append(gap_sentence(g.iloc[0].to_dict()) if len(g) == 1 else
                   f"{len(g)} multi-device points cannot be split: {reason}.")
    return out


def _display(gap: pd.DataFrame) -> pd.DataFrame:
    """gap_data with readable columns: times in s or ms, each part with its share of the gap."""
    def part(r, p):
        return "—" if r["reason"] else f"{fmt_time(r[f'{p}_s'])} ({_share(r[f'{p}_share'])})"
    rows = []
    for r in gap.to_dict("records"):
        rows.append({"experiment": r["experiment"], "framework": framework_label(r["framework"]),
                     "model": model_label(r["model"]), "batch": r["batch_size"], "workers": r["series_workers"],
                     "devices": f"{r['base_devices']:g} → {r['devices']:g}",
                     "runs (base / point)": f"{r['base_n_runs']} / {r['n_runs']}",
                     "base epoch": fmt_time(r["base_epoch_s"]), "ideal (base / N)": fmt_time(r["ideal_s"]),
                     "measured epoch": fmt_time(r["epoch_s"]),
                     "speed-up": "—" if r["reason"] else f"{r['speedup']:.2f}× of {r['ideal_speedup']:g}×",
                     "gap": fmt_time(r["gap_s"]), **{PART_SHORT[p]: part(r, p) for p in PARTS},
                     "why not split": r["reason"] or ""})
    return pd.DataFrame(rows)


def gap_anchor(r) -> str:
    """The id of a gap_data row's row in the table (answers link to it)."""
    return row_anchor("speedup_gap", r["experiment"], r["framework"], r["model"], r["batch_size"],
                      r["series_workers"], r["devices"])


def gap_table(gap: pd.DataFrame):
    """The split as a TableSet: readable grid, gap_data's numbers (seconds, shares) in the CSV."""
    shown = _display(gap)
    table = frame_table(
        shown, "speedup_gap", "Where the missing speed-up goes",
        "Per multi-device point: the slowest rank's mean steady-state epoch time (warm-up excluded; the scaling "
        "table uses the median), the ideal (the fewest devices' epoch time / N) and the gap between them, split "
        "into measured parts per epoch, each with its share of the gap: extra steps (a rank does more than 1/N of "
        "the base's batches: rounding, padding) at the base's step time; loader wait (more waiting per step); "
        "compute contention (batch preparation, copy, forward and optimizer slower per step than at the base, "
        "and the backward's compute assumed to slow down as the forward did: ranks share cores and memory "
        "bandwidth); gradient all-reduce and waiting for the slowest rank (the rest of the backward); "
        "unexplained (the residual: time in the epoch outside the steps, and noise). The parts sum to the gap; "
        "a negative part gave time back. Mean over the repeats (runs) of each point; analysis/projection/speedup_gap.py.",
        empty_text="No multi-device point with ok timing runs at its base: nothing to split.",
        group_col="experiment", row_id=[gap_anchor(r) for r in gap.to_dict("records")])
    table.data = gap  # the CSV keeps the numbers
    return table
