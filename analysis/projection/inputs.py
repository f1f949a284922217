"""What the projection stands on: the ok timing runs of each configuration and device count as
per-step profiles (Measured), their 1 -> 2 device contention, the all-reduce micro-benchmark's
fit, the pooled launch noise, and where a configuration outgrows its host (analysis.projection.predict)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import EXPERIMENT_KEYS, PHASE_COLUMNS
from analysis.grouping import _key_text
from analysis.projection.formulas import OUTSIDE, wait_factor
from analysis.projection.speedup_gap import run_profiles, timing_runs
from runners.rank.stopping import WARMUP_EPOCHS

CONFIG = ("experiment", "framework", "model", "batch_size", "workers")
CONTENDED = ("load_wait_s", "prepare_s", "copy_s", "forward_s", "optimizer_s", OUTSIDE)
# Settings of when a run stops, not of what a step does: a configuration measured only at several
# devices (a fixed-schedule experiment) is projected from the 1-device runs of its twin that
# differs in these alone.
SCHEDULE_KEYS = ("until", "epochs", "precision", "min_steady_epochs", "max_train_s", "eval_every")


def load_collectives(path) -> dict | None:
    """The micro-benchmark's fit (alpha, beta, relative errors, backend, cores), or None."""
    if not path:
        return None
    doc = json.loads(Path(path).read_text())
    fit = doc["fit"]
    return {"alpha_s": fit["alpha_s"], "beta_s_per_byte": fit["beta_s_per_byte"],
            "errors": [pt["relative_error"] for pt in fit["points"]], "backend": doc.get("backend"),
            "procs": doc.get("procs"), "host": (doc.get("env") or {}).get("hostname"),
            "cores": (doc.get("env") or {}).get("cpu_cores"), "source": str(path)}


def collectives_notes(coll: dict | None, runs: pd.DataFrame) -> list:
    """Where the micro-benchmark and the runs were measured differently (backend, host, cores)."""
    if not coll:
        return ["no all-reduce micro-benchmark: alpha from the other configurations' measured 2-device all-reduce "
                "and waiting, beta 0 (python -m benchmarks.collectives measures both)"]
    notes = []
    for what, mine, col in (("backend", coll.get("backend"), "backend"), ("host", coll.get("host"), "env_hostname"),
                            ("cores", coll.get("cores"), "env_cpu_cores")):
        theirs = sorted({str(v) for v in runs[col].dropna()}) if col in runs else []
        if mine is not None and theirs and theirs != [str(mine)]:
            notes.append(f"the micro-benchmark's {what} is {mine}, the runs' {', '.join(theirs)}")
    return notes


def parameter_count(row) -> float:
    """The run's parameter count: runs.csv's column, else its result.json (older aggregates)."""
    v = row.get("parameters")
    if v is not None and not pd.isna(v):
        return float(v)
    path = row.get("result_path")
    try:
        ranks = json.loads(Path(path).read_text()).get("ranks") or []
    except (OSError, TypeError, ValueError):
        return math.nan
    return float(next((r["parameters"] for r in ranks if r.get("parameters")), math.nan))


def relative_steps(steps: pd.DataFrame, run_ids, batch: int) -> dict:
    """run_id -> its steady full-batch local step times over their mean (rank 0, 1-device runs)."""
    s = steps[steps["run_id"].isin(list(run_ids)) & (steps["epoch"] >= WARMUP_EPOCHS)]
    out = {}
    for rid, g in s.groupby("run_id"):
        full = g[g["seed_nodes"] == batch] if "seed_nodes" in g else g
        x = (full if len(full) >= 2 else g)[list(PHASE_COLUMNS)].sum(axis=1).to_numpy(dtype=float)
        if len(x) >= 2 and x.mean() > 0:
            out[rid] = x / x.mean()
    return out


COLS = ("T", "S", *PHASE_COLUMNS, OUTSIDE)  # a run's profile: epoch time, steps, per-step phases, outside
COL = {c: i for i, c in enumerate(COLS)}  # a column's place in a profile


class Measured:
    """The ok timing runs per configuration and device count, with their profiles (one row of
    COLS per run)."""

    def __init__(self, runs: pd.DataFrame, epochs: pd.DataFrame, steps: pd.DataFrame):
        runs = timing_runs(runs)
        runs = runs[runs["status"] == "ok"]
        if "strategy" in runs:  # the model is the replicated one: every rank holds the graph
            runs = runs[runs["strategy"].fillna("replicated") == "replicated"]
        prof = run_profiles(epochs, steps)
        prof = prof[prof["phased"].astype(bool) & (prof["S"] > 0)].copy()
        for p in PHASE_COLUMNS:
            prof[p] = prof[p] / prof["S"]  # per step
        prof[OUTSIDE] = prof["T"] - prof["S"] * prof[list(PHASE_COLUMNS)].sum(axis=1)
        self.runs = runs[runs["run_id"].isin(prof["run_id"])].copy()
        self.prof = prof.set_index("run_id")
        self.steps = steps
        self.configs = {key: g for key, g in self.runs.groupby(list(CONFIG), sort=False)}
        same = [k for k in (*EXPERIMENT_KEYS, *CONFIG[1:]) if k in runs and k not in SCHEDULE_KEYS]
        self.identity = {key: tuple(_key_text(v) for v in g.iloc[0][same]) for key, g in self.configs.items()}
        self.arrays, self.rel = {}, {}
        for key, g in self.configs.items():
            for d, gd in g.groupby("devices"):
                self.arrays[key, int(d)] = (list(gd["run_id"]), self.prof.loc[gd["run_id"], list(COLS)].to_numpy(float))
            if (key, 1) in self.arrays:
                rel = relative_steps(steps, self.arrays[key, 1][0], int(g["batch_size"].iloc[0]))
                self.rel[key] = np.concatenate(list(rel.values())) if rel else np.array([])
        # w_2 per configuration: its steps are not resampled, so each bootstrap draw reuses it
        self.wait2 = {key: wait_factor(rel, 2) for key, rel in self.rel.items()}

    def profiles(self, key, devices) -> np.ndarray:
        """Runs x COLS of the configuration at `devices` (no rows where none was measured)."""
        return self.arrays.get((key, devices), ([], np.empty((0, len(COLS)))))[1]

    def device_counts(self, key) -> list:
        return sorted(d for k, d in self.arrays if k == key)

    def base_for(self, key):
        """The configuration whose 1-device runs `key` is projected from: itself, else its twin
        differing only in the schedule (SCHEDULE_KEYS); None without either."""
        if (key, 1) in self.arrays:
            return key
        return next((k for k in self.configs if (k, 1) in self.arrays and self.identity[k] == self.identity[key]),
                    None)

    def ratios(self, key, rng=None) -> dict | None:
        """The configuration's measured 2-device over 1-device per-step factors (runs resampled
        with `rng`), plus its all-reduce and waiting residual per step at 2 devices."""
        one, two = self.profiles(key, 1), self.profiles(key, 2)
        if not len(one) or not len(two):
            return None
        if rng is not None:
            one = one[rng.integers(0, len(one), len(one))]
            two = two[rng.integers(0, len(two), len(two))]
        # sum / count is what ndarray.mean computes, without its per-call overhead (a bootstrap
        # calls this ~10^5 times)
        m1, m2 = one.sum(axis=0) / len(one), two.sum(axis=0) / len(two)
        r = {p: (m2[COL[p]] / m1[COL[p]] if m1[COL[p]] > 0 else math.nan) for p in CONTENDED}
        # what the backward spent beyond its compute (slowed as the forward): all-reduce and waiting
        r["residual_s"] = m2[COL["backward_s"]] - m1[COL["backward_s"]] * r["forward_s"]
        local2 = sum(m1[COL[p]] * (r["forward_s"] if p == "backward_s" else r[p]) for p in PHASE_COLUMNS)
        r["wait2_s"] = local2 * self.wait2.get(key, 0.0)  # the modelled part of the residual
        return r


def _pool_key(row) -> tuple:
    """Configurations whose contention is comparable: the same host kind and processes per rank."""
    return (row.get("device_type"), row.get("env_cpu_cores"), row.get("workers"))


def geomean_ratios(rs: list) -> dict:
    """Per contended phase, the geometric mean of the finite positive 2-device factors (else 1)."""
    out = {}
    for p in CONTENDED:
        v = np.array([r[p] for r in rs if np.isfinite(r[p]) and r[p] > 0])
        out[p] = float(np.exp(np.log(v).mean())) if len(v) else 1.0
    return out


def launch_noise_sd(runs: pd.DataFrame) -> float:
    """The pooled launch noise (SD of log epoch time between repeats) over every configuration."""
    from analysis.repeats.noise import pooled_variance

    ok = runs.dropna(subset=["steady_epoch_mean_s"])
    samples = [list(np.log(g["steady_epoch_mean_s"].astype(float))) for _, g in
               ok.groupby([*CONFIG, "devices"], sort=False) if len(g) > 1]
    var, dof = pooled_variance(samples) if samples else (math.nan, 0)
    return math.sqrt(var) if dof and np.isfinite(var) else 0.0


def host_limits(g: pd.DataFrame) -> dict:
    """Where the model stops for a configuration: CPU oversubscription and host memory."""
    first = g.iloc[0]
    workers, cores = int(first["workers"]), first.get("env_cpu_cores")
    cpu = int(cores) // (1 + workers) + 1 if pd.notna(cores) else math.nan
    limit = first.get("mem_limit_bytes")
    limit = limit if pd.notna(limit) and limit else first.get("env_memory_bytes")
    out = {"oversubscribed_from": cpu, "cpu_cores": cores, "memory_limit_bytes": limit}
    for col, name in (("mem_peak_bytes", "measured"), ("mem_model_bytes", "modelled")):
        per = g.groupby("devices")[col].mean().dropna() if col in g else pd.Series(dtype=float)
        if len(per) < 2 or not pd.notna(limit):
            out[f"memory_{name}_from"] = math.nan
            continue
        slope, shared = np.polyfit(per.index.astype(float), per.to_numpy(dtype=float), 1)
        out[f"memory_{name}_per_rank_bytes"] = slope
        # the first N whose replicated peak (shared + N per rank) exceeds the host
        # (1e-9: a fit's rounding must not cost an exact last rank its place)
        out[f"memory_{name}_from"] = math.floor((limit - shared) / slope + 1e-9) + 1 if slope > 0 else math.inf
    return out


def contention_pool(meas: Measured, key, exclude_self: bool) -> list:
    """The configurations whose 1 -> 2 contention `key` borrows: those on a comparable host
    (_pool_key), else any measured at 1 and 2 devices; without `key` and its twin if `exclude_self`.
    Not narrowed to the same framework or loader: on two stored sweeps that raised the main
    experiment's median held-out error from 10 % to 14-15 % (fewer configurations, noisier factors),
    and it helped GraphBolt's two points on one sweep and hurt them on the other."""
    me = _pool_key(meas.configs[key].iloc[0])
    # out of sample: neither the configuration nor its schedule twin (the same steps, measured apart)
    mine = [k for k in meas.configs if exclude_self and meas.identity[k] == meas.identity[key]]
    pool = [k for k, g in meas.configs.items() if _pool_key(g.iloc[0]) == me and meas.ratios(k) is not None
            and k not in mine]
    if not pool:  # no comparable configuration: any with a measured 1 -> 2 pair
        pool = [k for k in meas.configs if meas.ratios(k) is not None and k not in mine]
    return pool


def inside(value: float, low: float, high: float) -> bool:
    """Whether a measured value lies in [low, high]; rounding does not push an exact one out."""
    tol = 1e-9 * max(abs(low), abs(high))
    return bool(low - tol <= value <= high + tol)


# The device counts the model is fitted on: 1 device's phases and the 1 -> 2 contention.
FIT_DEVICES = (1, 2)


def beyond_fit(res: dict) -> pd.DataFrame:
    """The projection checked past the device counts it is fitted on: every projected configuration
    at a measured device count above FIT_DEVICES, with `error` (predicted / measured - 1) and
    `inside` (the measured mean in the interval). The model reads the 1- and 2-device runs only,
    so these points are out of sample by construction: the check a machine with more cores
    (4 and 8 processes) runs with `python -m analysis.projection`."""
    p = res.get("projection", pd.DataFrame())
    if p.empty:
        return p
    past = p[(p["devices"] > max(FIT_DEVICES)) & p["measured_s"].notna()].copy()
    past["error"] = past["predicted_s"] / past["measured_s"] - 1
    past["inside"] = [inside(m, lo, hi) for m, lo, hi in zip(past["measured_s"], past["low_s"], past["high_s"])]
    return past
