"""What more devices would give: a configuration's epoch time at N devices, projected from its
measured breakdown, and the projection checked out of sample on the device counts measured.

Per configuration (experiment x framework x model x batch size b x loader workers) and N ranks,
the slowest rank's steady epoch time is modelled as

    T(N) = S(N) [ L(N) (1 + w_N) + A(N) ] + O g_out(N)
    S(N) = min(ceil(seeds / (b N)), max_steps)       steps per rank (runners.harness.split_seeds
                                                      pads one permutation to an equal share)
    L(N) = sum_p phi_p g_p(N) u_p(N)                 a rank's local step: loader wait, preparation,
                                                      copy, forward, backward, optimizer
    u_p(N) = seeds per step at N / at 1              (1 for the optimizer: it updates every parameter)
    g_p(N) = max(min(1, r_p), 1 + (r_p - 1)(N - 1))  contention, r_p measured from 1 to 2 devices
    w_N = E[max of N step draws] / E[step] - 1       waiting for the slowest rank
    A(N) = k 2(N-1) alpha + 2(N-1)/N n beta          ring all-reduce of n gradient bytes in k buckets
    O                                                the 1-device epoch's time outside its steps

phi_p are the 1-device per-step phase times (analysis.speedup_gap.run_profiles: slowest rank,
steady epochs, mean over runs); at one device the backward holds no all-reduce. r_p is the
phase's per-step time at 2 devices over 1 device; the backward's compute is taken to slow as the
forward does (its 2-device time also holds the all-reduce and the waiting). w_N treats ranks as
independent draws from the 1-device runs' distribution of full-batch step times (relative to
their mean): E[max of N] of m sorted values x_i is sum_i x_i ((i/m)^N - ((i-1)/m)^N). n is 4 bytes
per parameter (float32 gradients), k is DDP's bucket count (a first bucket of 1 MiB, then 25 MiB
each). alpha, beta come from the all-reduce micro-benchmark (benchmarks/collectives.py); without
one, alpha is estimated from the other configurations' measured 2-device all-reduce and waiting
(the backward beyond its compute, less the modelled waiting) and beta is 0: one message size
cannot separate the bandwidth term.

Assumptions, stated with every result (ASSUMPTIONS): each rank beyond the first slows every phase
by the factor the second one did (linear in N - 1; a phase that got faster keeps its 2-device
factor); ranks' step times are independent; the all-reduce in training costs what the
micro-benchmark measured alone. The interval is the 2.5-97.5% percentile of a bootstrap over the
repeats (runs) of each side, over the configurations the contention is pooled from, over the
all-reduce fit's relative errors, plus the pooled launch noise (analysis.noise) of the mean of
the runs predicted; the speed-up's interval pairs each draw's T(1) with its T(N), with one launch's
noise at each end. Where 3+ device counts are measured the Universal Scalability Law
C(N) = N / (1 + sigma (N-1) + kappa N (N-1)) is fitted (kappa > 0: retrograde scaling).

    python -m analysis.project --aggregate results/aggregate --devices 4,8,16 \
        [--collectives results/benchmarks/collectives.json]

The report (analysis.report) calls project() on the aggregate it holds in memory, projects to
REPORT_DEVICES, and states the answer (answer_parts), the tables (report_tables) and what the
projection rests on (page_notes) for its main experiment.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import EXPERIMENT_KEYS, PHASE_COLUMNS
from analysis.display import frame_table, row_anchor
from analysis.grouping import _key_text
from analysis.speedup_gap import run_profiles, timing_runs
from runners.stopping import WARMUP_EPOCHS

CONFIG = ("experiment", "framework", "model", "batch_size", "workers")
OUTSIDE = "outside_s"  # the epoch's time outside its steps
CONTENDED = ("load_wait_s", "prepare_s", "copy_s", "forward_s", "optimizer_s", OUTSIDE)
FIRST_BUCKET_BYTES = 2**20  # torch DDP's first gradient bucket (_DEFAULT_FIRST_BUCKET_BYTES)
BUCKET_BYTES = 25 * 2**20   # DDP's bucket_cap_mb default; the harness keeps it
BOOTSTRAP = 400
# Settings of when a run stops, not of what a step does: a configuration measured only at several
# devices (a fixed-schedule experiment) is projected from the 1-device runs of its twin that
# differs in these alone.
SCHEDULE_KEYS = ("until", "epochs", "precision", "min_steady_epochs", "max_train_s", "eval_every")
ASSUMPTIONS = (
    "contention: each rank beyond the first slows every phase by the factor the second one did (linear in N-1, "
    "measured 1->2; a phase that got faster keeps its 2-device factor); the backward's compute slows as the forward",
    "waiting: ranks draw their step times independently from the 1-device runs' full-batch step distribution",
    "all-reduce: ring alpha-beta of the micro-benchmark, float32 gradients in DDP's buckets, not overlapped "
    "with the backward",
    "outside the steps: the 1-device epoch's time outside its steps, slowed like the phases",
    "work: a step's phases but the optimizer scale with its seeds (a rank's share smaller than a batch)",
    "the model holds while ranks x (1 + workers) <= cores and the replicated peak memory fits the host",
)


# -- pieces of the model ------------------------------------------------------------------------

def parse_devices(text: str) -> list:
    """'4,8,16' -> [4, 8, 16]; anything but positive whole numbers is refused by name."""
    out = []
    for part in str(text).split(","):
        try:
            n = int(part.strip())
        except ValueError:
            n = 0
        if n < 1 or part.strip() != str(n):
            raise ValueError(f"--devices {text!r}: {part.strip()!r} is not a positive whole number of devices "
                             "(give e.g. 4,8,16)")
        out.append(n)
    return sorted(set(out))


def steps_at(seeds: int, batch: int, n: int, max_steps: int = 0) -> int:
    """Steps per rank per epoch at n ranks: ceil(ceil(seeds / n) / batch) = ceil(seeds / (batch n))."""
    steps = -(-int(seeds) // (int(batch) * int(n)))
    return min(steps, int(max_steps)) if max_steps and max_steps > 0 else steps


def contention(r: float, n: int) -> float:
    """g(n): a phase's slow-down at n ranks from its measured 2-rank factor r (linear in n-1)."""
    if not np.isfinite(r):
        return 1.0
    return max(min(1.0, r), 1.0 + (r - 1.0) * (n - 1))


def expected_max(values, n: int) -> float:
    """E[max of n independent draws] from the empirical distribution of `values`."""
    x = np.sort(np.asarray(values, dtype=float))
    m = len(x)
    i = np.arange(1, m + 1)
    return float(np.sum(x * ((i / m) ** n - ((i - 1) / m) ** n)))


def wait_factor(relative_steps, n: int) -> float:
    """w_n: how much longer the slowest of n ranks' steps is than the mean step (0 at n = 1)."""
    x = np.asarray(relative_steps, dtype=float)
    if n <= 1 or len(x) < 2:
        return 0.0
    return expected_max(x, n) / x.mean() - 1.0


def buckets(nbytes: float) -> int:
    """DDP's gradient buckets for nbytes of gradients."""
    return 1 + max(0, math.ceil((nbytes - FIRST_BUCKET_BYTES) / BUCKET_BYTES))


def allreduce_s(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-reduce of nbytes in DDP's buckets at n ranks: k 2(n-1) alpha + 2(n-1)/n nbytes beta."""
    if n <= 1:
        return 0.0
    return buckets(nbytes) * 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta


def step_seeds(seeds: int, batch: int, n: int) -> float:
    """A rank's mean seeds per step at n ranks: its share over its steps (the last one partial)."""
    share = -(-int(seeds) // int(n))
    return share / -(-share // int(batch))


def epoch_time(n: int, base: dict, r: dict, steps: int, rel_steps, nbytes: float, alpha: float, beta: float,
               ar_scale: float = 1.0, work: float = 1.0) -> dict:
    """T(n) and its parts from a 1-device profile `base` (per-step phases and outside_s), the
    contention factors r (phase -> 2-device factor), the all-reduce's alpha, beta, and `work`:
    seeds per step at n over those at 1 (a share smaller than a batch makes a smaller step)."""
    local = 0.0
    for p in PHASE_COLUMNS:
        factor = r.get("forward_s" if p == "backward_s" else p, 1.0)
        # the optimizer updates every parameter whatever the batch; the other phases scale with it
        local += base[p] * contention(factor, n) * (1.0 if p == "optimizer_s" else work)
    wait = local * wait_factor(rel_steps, n)
    ar = allreduce_s(n, nbytes, alpha, beta) * ar_scale
    outside = base[OUTSIDE] * contention(r.get(OUTSIDE, 1.0), n)
    total = steps * (local + wait + ar) + outside
    return {"epoch_s": total, "steps": steps, "local_s": steps * local, "wait_s": steps * wait,
            "allreduce_s": steps * ar, "outside_s": outside}


def fit_usl(devices, times) -> dict:
    """sigma, kappa of C(N) = N / (1 + sigma (N-1) + kappa N (N-1)) from epoch times at 3+ device
    counts, one of them 1 (C(N) = T(1) / T(N)); NNLS on N / C(N) - 1."""
    from scipy.optimize import nnls

    d = np.asarray(devices, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(set(d)) < 3 or 1 not in set(d):
        raise ValueError("the Universal Scalability Law needs 3 or more device counts, 1 among them")
    t1 = t[d == 1].mean()
    keep = d > 1
    c = t1 / t[keep]
    a = np.column_stack([d[keep] - 1, d[keep] * (d[keep] - 1)])
    (sigma, kappa), _ = nnls(a, d[keep] / c - 1)
    peak = math.sqrt((1 - sigma) / kappa) if kappa > 0 and sigma < 1 else math.inf
    return {"sigma": float(sigma), "kappa": float(kappa), "retrograde": bool(kappa > 0), "peak_devices": peak}


def usl_speedup(n, sigma: float, kappa: float):
    return n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


# -- what the runs measured -----------------------------------------------------------------------

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


def _parameters(row) -> float:
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
_C = {c: i for i, c in enumerate(COLS)}


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
        m1, m2 = one.mean(axis=0), two.mean(axis=0)
        r = {p: (m2[_C[p]] / m1[_C[p]] if m1[_C[p]] > 0 else math.nan) for p in CONTENDED}
        # what the backward spent beyond its compute (slowed as the forward): all-reduce and waiting
        r["residual_s"] = m2[_C["backward_s"]] - m1[_C["backward_s"]] * r["forward_s"]
        local2 = sum(m1[_C[p]] * (r["forward_s"] if p == "backward_s" else r[p]) for p in PHASE_COLUMNS)
        r["wait2_s"] = local2 * wait_factor(self.rel.get(key, []), 2)  # the modelled part of the residual
        return r


def _pool_key(row) -> tuple:
    """Configurations whose contention is comparable: the same host kind and processes per rank."""
    return (row.get("device_type"), row.get("env_cpu_cores"), row.get("workers"))


def _geomean_ratios(rs: list) -> dict:
    out = {}
    for p in CONTENDED:
        v = np.array([r[p] for r in rs if np.isfinite(r[p]) and r[p] > 0])
        out[p] = float(np.exp(np.log(v).mean())) if len(v) else 1.0
    return out


# -- projection and validation ------------------------------------------------------------------

class Model:
    """The model fitted to one configuration from its 1-device runs, a contention source and the
    all-reduce fit: `point(n)` gives the epoch time and its parts, `draws_at(ns)` bootstrap draws of it."""

    def __init__(self, meas: Measured, key, pool: list, own_contention: bool, collectives: dict | None,
                 seed: int = 0, draws: int = BOOTSTRAP):
        key = meas.base_for(key)  # the 1-device runs it stands on
        self.meas, self.key, self.pool, self.own = meas, key, pool, own_contention
        self.coll, self.seed, self.draws = collectives, seed, draws
        self.runs = meas.configs[key]
        first = self.runs.iloc[0]
        self.batch = int(first["batch_size"])
        self.seeds = int(first["train_split_seed_nodes"])
        cap = first.get("max_steps_per_epoch")
        self.max_steps = int(cap) if pd.notna(cap) and cap else 0
        params = self.runs.apply(_parameters, axis=1).dropna()
        self.nbytes = 4 * float(params.iloc[0]) if len(params) else math.nan
        self.ids, self.one = meas.arrays[key, 1]
        rel = relative_steps(meas.steps, self.ids, self.batch)
        self.rel = [rel.get(i, np.array([])) for i in self.ids]  # in the order of self.one's rows

    def _contention(self, rng=None) -> dict:
        """The 2-device factors: the configuration's own, or the pool's geometric mean (the pool's
        configurations resampled with `rng`), and the pool's all-reduce residuals."""
        sources = [self.key] if self.own else list(self.pool)
        if rng is not None and not self.own:
            sources = [sources[i] for i in rng.integers(0, len(sources), len(sources))]
        rs = [r for r in (self.meas.ratios(k, rng) for k in sources) if r]
        out = _geomean_ratios(rs)
        residual_pool = [self.meas.ratios(k, rng) for k in self.pool] if self.own else rs
        out["_residuals"] = [r for r in residual_pool if r]
        return out

    def _alpha_beta(self, r: dict) -> tuple:
        """(alpha, beta, source): the micro-benchmark's, else alpha from the pool's measured residual
        less its modelled waiting (2 alpha at 2 ranks)."""
        if self.coll:
            return self.coll["alpha_s"], self.coll["beta_s_per_byte"], "micro-benchmark"
        est = [max(0.0, x["residual_s"] - x["wait2_s"]) / 2 for x in r["_residuals"]]
        return (float(np.median(est)) if est else 0.0), 0.0, "fallback: the other configurations' 2-device residual"

    def work(self, n: int) -> float:
        return step_seeds(self.seeds, self.batch, n) / step_seeds(self.seeds, self.batch, 1)

    def _base(self, one: np.ndarray) -> dict:
        m = one.mean(axis=0)
        return {p: m[_C[p]] for p in (*PHASE_COLUMNS, OUTSIDE)}

    def point(self, n: int) -> dict:
        r = self._contention()
        rel = np.concatenate(self.rel)
        alpha, beta, src = self._alpha_beta(r)
        nbytes = self.nbytes if np.isfinite(self.nbytes) else 0.0
        out = epoch_time(n, self._base(self.one), r, steps_at(self.seeds, self.batch, n, self.max_steps), rel,
                         nbytes, alpha, beta, work=self.work(n))
        return {**out, "alpha_s": alpha, "beta_s_per_byte": beta, "allreduce_source": src,
                "gradient_bytes": self.nbytes, **{f"r_{p}": r[p] for p in CONTENDED}}

    def draws_at(self, ns, noise_sd: float = 0.0, n_runs: int = 1) -> np.ndarray:
        """Bootstrap epoch times, shape (draws, len(ns))."""
        rng = np.random.default_rng(self.seed)
        errors = (self.coll or {}).get("errors") or [0.0]
        out = np.empty((self.draws, len(ns)))
        for b in range(self.draws):
            pick = rng.integers(0, len(self.one), len(self.one))
            one = self.one[pick]
            rel = np.concatenate([self.rel[i] for i in pick])
            r = self._contention(rng)
            alpha, beta, _ = self._alpha_beta(r)
            # the fit's error at a point is predicted / measured - 1: measured = predicted / (1 + e)
            scale = 1.0 / (1.0 + errors[rng.integers(0, len(errors))])
            base = self._base(one)
            noise = math.exp(rng.normal(0.0, noise_sd / math.sqrt(n_runs))) if noise_sd else 1.0
            for j, n in enumerate(ns):
                t = epoch_time(n, base, r, steps_at(self.seeds, self.batch, n, self.max_steps), rel,
                               self.nbytes if np.isfinite(self.nbytes) else 0.0, alpha, beta, scale, self.work(n))
                out[b, j] = t["epoch_s"] * noise
        return out


def inside(value: float, low: float, high: float) -> bool:
    """Whether a measured value lies in [low, high]; rounding does not push an exact one out."""
    tol = 1e-9 * max(abs(low), abs(high))
    return bool(low - tol <= value <= high + tol)


def _noise_sd(runs: pd.DataFrame) -> float:
    """The pooled launch noise (SD of log epoch time between repeats) over every configuration."""
    from analysis.noise import pooled_variance

    ok = runs.dropna(subset=["steady_epoch_mean_s"])
    samples = [list(np.log(g["steady_epoch_mean_s"].astype(float))) for _, g in
               ok.groupby([*CONFIG, "devices"], sort=False) if len(g) > 1]
    var, dof = pooled_variance(samples) if samples else (math.nan, 0)
    return math.sqrt(var) if dof and np.isfinite(var) else 0.0


def _stops(g: pd.DataFrame) -> dict:
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


def _label(key) -> dict:
    return dict(zip(CONFIG, key))


def _pool_for(meas: Measured, key, exclude_self: bool) -> list:
    me = _pool_key(meas.configs[key].iloc[0])
    # out of sample: neither the configuration nor its schedule twin (the same steps, measured apart)
    mine = [k for k in meas.configs if exclude_self and meas.identity[k] == meas.identity[key]]
    pool = [k for k, g in meas.configs.items() if _pool_key(g.iloc[0]) == me and meas.ratios(k) is not None
            and k not in mine]
    if not pool:  # no comparable configuration: any with a measured 1 -> 2 pair
        pool = [k for k in meas.configs if meas.ratios(k) is not None and k not in mine]
    return pool


def project(runs: pd.DataFrame, epochs: pd.DataFrame, steps: pd.DataFrame, devices, collectives=None,
            draws: int = BOOTSTRAP) -> dict:
    """DataFrames: `projection` (per configuration and N: predicted epoch time, interval, parts,
    speed-up, where the model stops), `validation` (every measured multi-device point predicted
    without its own multi-device runs, beside the measured value), `usl` (fits where 3+ device
    counts were measured), and `assumptions`."""
    coll = load_collectives(collectives) if isinstance(collectives, (str, Path)) else collectives
    meas = Measured(runs, epochs, steps)
    sd = _noise_sd(meas.runs)
    cfg = meas.runs[list(CONFIG)].apply(tuple, axis=1)
    proj, val, usl = [], [], []
    for key, g in meas.configs.items():
        counts = meas.device_counts(key)
        label = _label(key)
        base = meas.base_for(key)
        if base is None:
            val += [{**label, "devices": d, "reason": "no 1-device run to project from, in its experiment or a "
                     "twin differing only in the schedule"} for d in counts if d > 1]
            continue
        stops = _stops(g)
        # projection: the configuration's own 1 -> 2 contention where measured
        own = meas.ratios(key) is not None
        pool = _pool_for(meas, key, exclude_self=False)
        if base == key and (own or pool):
            model = Model(meas, key, pool, own, coll, draws=draws)
            ns = sorted(set(devices) | set(counts))
            sims = model.draws_at(ns, sd, 1)
            t1 = model.point(1)["epoch_s"]
            # the speed-up's interval pairs each draw's T(1) with its T(n) (the runs and contention they
            # share cancel); the common launch noise cancels too, so one launch's noise at each end is added
            ratio = sims[:, [ns.index(1)]] / sims * np.exp(np.random.default_rng(1).normal(
                0.0, sd * math.sqrt(2), sims.shape)) if sd else sims[:, [ns.index(1)]] / sims
            for j, n in enumerate(ns):
                pt = model.point(n)
                lo, hi = np.percentile(sims[:, j], [2.5, 97.5])
                slo, shi = np.percentile(ratio[:, j], [2.5, 97.5]) if n != 1 else (1.0, 1.0)
                measured = meas.profiles(key, n)[:, _C["T"]].mean() if n in counts else math.nan
                proj.append({**label, "devices": n, "predicted_s": pt["epoch_s"], "low_s": lo, "high_s": hi,
                             "measured_s": measured, "speedup": t1 / pt["epoch_s"], "speedup_low": slo,
                             "speedup_high": shi,
                             "efficiency": t1 / pt["epoch_s"] / n,
                             **{k: pt[k] for k in ("steps", "local_s", "wait_s", "allreduce_s", "outside_s",
                                                   "gradient_bytes", "alpha_s", "beta_s_per_byte",
                                                   "allreduce_source", *(f"r_{c}" for c in CONTENDED))},
                             "contention_from": "its own 1->2 runs" if own else f"{len(pool)} other configurations",
                             "beyond_cpu": n >= stops["oversubscribed_from"],
                             "beyond_memory": n >= stops.get("memory_measured_from", math.inf), **stops})
        # validation: without this configuration's multi-device runs
        vpool = _pool_for(meas, key, exclude_self=True)
        for d in (c for c in counts if c > 1):
            if not vpool:
                val.append({**label, "devices": d, "reason": "no other configuration measured 1 -> 2"})
                continue
            model = Model(meas, key, vpool, False, coll, draws=draws)
            point = meas.profiles(key, d)
            pt = model.point(d)
            # the launch noise, too, is pooled without this configuration's multi-device runs
            vsd = _noise_sd(meas.runs[~(cfg.map(lambda c: c == key) & (meas.runs["devices"] > 1))])
            sims = model.draws_at([d], vsd, len(point))[:, 0]
            lo, hi = np.percentile(sims, [2.5, 97.5])
            m = point[:, _C["T"]].mean()
            ideal = meas.profiles(base, 1)[:, _C["T"]].mean() / d  # the naive prediction the model must beat
            val.append({**label, "devices": d, "n_runs": len(point), "measured_s": m, "predicted_s": pt["epoch_s"],
                        "ideal_s": ideal, "ideal_error": ideal / m - 1,
                        "low_s": lo, "high_s": hi, "error": pt["epoch_s"] / m - 1, "inside": inside(m, lo, hi),
                        "steps_model": pt["steps"], "steps_measured": point[:, _C["S"]].mean(),
                        "contention_pool": len(vpool), "allreduce_source": pt["allreduce_source"],
                        "base": "its own 1-device runs" if base == key else f"1-device runs of: {base[0]}",
                        "reason": None})
        if len(counts) >= 3:
            per = [meas.profiles(key, d)[:, _C["T"]].mean() for d in counts]
            usl.append({**label, "device_counts": ",".join(map(str, counts)), **fit_usl(counts, per)})
    usl_cols = [*CONFIG, "device_counts", "sigma", "kappa", "retrograde", "peak_devices"]
    terms = []
    for key in meas.configs:  # in sample: which term of the 2-device step the model misses
        r = meas.ratios(key)
        if r is None:
            continue
        model = Model(meas, key, [key], True, coll, draws=1)
        pt = model.point(2)
        terms.append({**_label(key), "residual_step_s": r["residual_s"], "wait_step_s": r["wait2_s"],
                      "allreduce_step_s": pt["allreduce_s"] / pt["steps"], **{f"r_{c}": r[c] for c in CONTENDED}})
    return {"projection": pd.DataFrame(proj), "validation": pd.DataFrame(val), "terms": pd.DataFrame(terms),
            "usl": pd.DataFrame(usl, columns=usl_cols), "assumptions": list(ASSUMPTIONS),
            "collectives": coll, "noise_sd": sd, "notes": collectives_notes(coll, meas.runs)}


def default_collectives(agg_dir) -> Path | None:
    """The micro-benchmark's JSON where it writes it by default, beside the aggregate
    (results/benchmarks/collectives.json for results/aggregate), if there is one."""
    path = Path(agg_dir).resolve().parent / "benchmarks" / "collectives.json"
    return path if path.is_file() else None


def project_aggregate(agg_dir, devices=(4, 8, 16), collectives="auto", draws: int = BOOTSTRAP) -> dict:
    """project() on an aggregate directory (runs.csv, epochs.csv, steps.csv), for the report;
    collectives "auto": the micro-benchmark's JSON beside it if there is one (default_collectives)."""
    d = Path(agg_dir)
    if collectives == "auto":
        collectives = default_collectives(d)
    runs, epochs, steps = (pd.read_csv(d / f"{n}.csv") for n in ("runs", "epochs", "steps"))
    return project(runs, epochs, steps, devices, collectives, draws)


# -- in words -------------------------------------------------------------------------------------

def _ms(v) -> str:
    return "—" if v is None or pd.isna(v) else f"{1e3 * v:.1f}"


def _who(r, common: str = "") -> str:
    """'pyg sage b1024 w0', with what sets its experiment apart from the `common` one."""
    mine = [p for p in str(r["experiment"]).split(" · ") if p not in common.split(" · ")]
    return f"{r['framework']} {r['model']} b{r['batch_size']} w{r['workers']}" + (
        f" ({', '.join(mine)})" if mine else "")


def _common(*frames) -> str:
    """The experiment most rows belong to: the others are named by how they differ from it."""
    exps = pd.concat([f["experiment"] for f in frames if len(f)]) if any(len(f) for f in frames) else pd.Series()
    return str(exps.mode().iloc[0]) if len(exps) else ""


def format_tables(res: dict) -> str:
    """The projection and validation tables as text, with where it stops, the USL and the assumptions."""
    lines = []
    p = res["projection"]
    common = _common(p, res["validation"])
    lines.append(f"Experiment: {common} (others named beside their rows)")
    lines.append("Projection (slowest rank's steady epoch, ms; interval 2.5-97.5%; "
                 "! past a stop: c = CPU oversubscribed, m = host memory)")
    lines.append(f"{'configuration':<46}{'N':>4}{'predicted':>11}{'interval':>21}{'measured':>10}{'speed-up':>10}"
                 f"{'steps':>6}{'local':>9}{'wait':>8}{'allred':>8}{'outside':>9}  stop")
    for r in p.to_dict("records"):
        stop = ("c" if r["beyond_cpu"] else "") + ("m" if r["beyond_memory"] else "")
        lines.append(f"{_who(r, common):<46}{r['devices']:>4}{_ms(r['predicted_s']):>11}"
                     f"{'[' + _ms(r['low_s']) + ', ' + _ms(r['high_s']) + ']':>21}{_ms(r['measured_s']):>10}"
                     f"{r['speedup']:>9.2f}x{r['steps']:>6}{_ms(r['local_s']):>9}{_ms(r['wait_s']):>8}"
                     f"{_ms(r['allreduce_s']):>8}{_ms(r['outside_s']):>9}  {('!' + stop) if stop else ''}")
    if len(p):
        first = p.drop_duplicates(subset=list(CONFIG))
        lines.append("Where it stops: " + "; ".join(
            f"{_who(r, common)}: oversubscribed from N={r['oversubscribed_from']}, host memory from "
            f"N={r.get('memory_measured_from', math.nan):.0f} (measured peaks), "
            f"{r.get('memory_modelled_from', math.nan):.0f} (runners' memory model)"
            for r in first.to_dict("records")))
        lines.append(f"All-reduce: {p['allreduce_source'].iloc[0]}"
                     + (f" ({res['collectives']['source']})" if res.get("collectives") else ""))
    v = res["validation"]
    lines.append("")
    lines.append("Validation: each multi-device point predicted without its own multi-device runs "
                 "(its 1-device runs, the all-reduce model, the other configurations' 1->2 contention); "
                 "ideal: T(1) / N, the naive prediction")
    lines.append(f"{'configuration':<46}{'N':>4}{'runs':>5}{'measured':>10}{'predicted':>11}{'interval':>21}"
                 f"{'error':>8}  inside{'ideal':>9}{'error':>8}")
    for r in v.to_dict("records"):
        if r.get("reason"):
            lines.append(f"{_who(r, common):<46}{r['devices']:>4}  not predicted: {r['reason']}")
            continue
        lines.append(f"{_who(r, common):<46}{r['devices']:>4}{int(r['n_runs']):>5}{_ms(r['measured_s']):>10}"
                     f"{_ms(r['predicted_s']):>11}{'[' + _ms(r['low_s']) + ', ' + _ms(r['high_s']) + ']':>21}"
                     f"{100 * r['error']:>+7.0f}%  {'yes' if r['inside'] else 'NO ':<6}{_ms(r['ideal_s']):>9}"
                     f"{100 * r['ideal_error']:>+7.0f}%")
    lines.append(verdict(v, common))
    t = res.get("terms")
    if t is not None and len(t):
        lines.append("")
        lines.append("In sample, per step at 2 devices (ms): the backward beyond its compute as measured, beside the "
                     "model's waiting and all-reduce; the contention factors measured 1->2")
        lines.append(f"{'configuration':<46}{'measured':>9}{'wait':>7}{'allred':>8}{'  r_load':>8}{'r_fwd':>7}"
                     f"{'r_opt':>7}{'r_out':>7}")
        for r in t.to_dict("records"):
            lines.append(f"{_who(r, common):<46}{_ms(r['residual_step_s']):>9}{_ms(r['wait_step_s']):>7}"
                         f"{_ms(r['allreduce_step_s']):>8}{r['r_load_wait_s']:>8.2f}{r['r_forward_s']:>7.2f}"
                         f"{r['r_optimizer_s']:>7.2f}{r['r_outside_s']:>7.2f}")
    u = res["usl"]
    lines.append("")
    if len(u):
        for r in u.to_dict("records"):
            lines.append(f"USL {_who(r, common)} ({r['device_counts']}): sigma {r['sigma']:.3f}, kappa {r['kappa']:.4f}"
                         + (f", retrograde past N = {r['peak_devices']:.1f}" if r["retrograde"] else ""))
    else:
        lines.append("USL: not fitted (no configuration has 3 or more device counts measured)")
    for note in res.get("notes") or []:
        lines.append(f"Note: {note}.")
    lines.append(f"Intervals: bootstrap over the runs, the contention pool and the all-reduce fit's errors, with "
                 f"the pooled launch noise (SD {100 * res['noise_sd']:.1f}% of one launch's epoch time).")
    lines.append("Assumptions: " + "; ".join(res["assumptions"]) + ".")
    return "\n".join(lines)


# The out-of-sample check fails where fewer points than about a 95% interval's rate fall inside
# (with a dozen points, 2 misses are chance, 3 are not) or the typical error is too large to plan on.
FAIL_INSIDE = 0.8
FAIL_ERROR = 0.15


def check(v: pd.DataFrame) -> dict | None:
    """The validation rows that were predicted, summed up: n, inside, median_error (absolute,
    relative) and fails (FAIL_INSIDE, FAIL_ERROR); None where no point was predicted."""
    ok = v[v["reason"].isna()] if len(v) and "reason" in v else v
    if ok.empty:
        return None
    n, inside = len(ok), int(ok["inside"].astype(bool).sum())
    med = float(ok["error"].abs().median())
    return {"rows": ok, "n": n, "inside": inside, "median_error": med,
            "fails": inside < FAIL_INSIDE * n or med > FAIL_ERROR}


def verdict(v: pd.DataFrame, common: str = "") -> str:
    """The validation in one sentence; it says so when the model fails."""
    c = check(v)
    if c is None:
        return "No multi-device point could be predicted out of sample."
    ok, inside, med = c["rows"], c["inside"], c["median_error"]
    missed = ok[~ok["inside"].astype(bool)]
    text = (f"{inside} of {len(ok)} measured points inside their 95% interval; median absolute error "
            f"{100 * med:.0f}%" + (f" (ideal scaling T(1)/N: {100 * ok['ideal_error'].abs().median():.0f}%)"
                                   if "ideal_error" in ok else "") + ".")
    if c["fails"]:
        text += " The model FAILS this check: " + (", ".join(
            f"{_who(r, common)} N={r['devices']} ({100 * r['error']:+.0f}%)" for r in missed.to_dict("records"))
            if len(missed) else f"a median error above {100 * FAIL_ERROR:.0f}%") + "."
    elif len(missed):
        text += " Outside: " + ", ".join(f"{_who(r, common)} N={r['devices']}" for r in missed.to_dict("records")) + "."
    return text


# -- on the report's page --------------------------------------------------------------------------

REPORT_DEVICES = (4, 8)  # the device counts the report projects to (besides those measured)
VALIDATION_ANCHOR = "#table-projection_validation"


def projection_anchor(r) -> str:
    """The id of a projection table row, so the first-screen sentence links to the row it quotes."""
    return row_anchor("projection", r["experiment"], r["framework"], r["model"], r["batch_size"], r["workers"],
                      r["devices"])


def of_experiment(res: dict | None, exp) -> tuple:
    """(projection, validation) rows of one experiment: the timing configurations the answers speak for."""
    out = []
    for name in ("projection", "validation"):
        df = (res or {}).get(name, pd.DataFrame())
        out.append(df[df["experiment"] == exp] if len(df) and exp is not None else df.iloc[0:0])
    return tuple(out)


def _oversubscribed(p: pd.DataFrame) -> str:
    """'a 2-core host is oversubscribed from 3 ranks (2 with a loader worker)', or '' where no
    projected count reaches it (or the cores are unknown)."""
    if p.empty:
        return ""
    first = p.drop_duplicates(subset=list(CONFIG)).dropna(subset=["oversubscribed_from"])
    if first.empty or not p["beyond_cpu"].astype(bool).any():
        return ""
    by = first.groupby("workers")["oversubscribed_from"].min().sort_index()
    cores = set(first["cpu_cores"].dropna().astype(int)) if "cpu_cores" in first else set()
    host = f"a {cores.pop()}-core host" if len(cores) == 1 else "the host"
    f0 = by.iloc[0]
    more = [f"{int(f)} with {'a' if w == 1 else w} loader worker{'s' if w != 1 else ''}"
            for w, f in list(by.items())[1:]]
    return f"{host} is oversubscribed from {int(f0)} ranks" + (f" ({', '.join(more)})" if more else "")


def answer_parts(res: dict | None, exp, measured: list) -> list:
    """The first-screen answer as (text, href) parts: per framework the median configuration's
    projected speed-up over 1 device, with its interval, at the first of REPORT_DEVICES beyond
    those measured, where the host is oversubscribed, and the out-of-sample check; it says
    plainly when that check fails. `measured`: the experiment's ok timing device counts."""
    from analysis import FRAMEWORK_ORDER, framework_label
    from analysis.stats import middle

    p, v = of_experiment(res, exp)
    if p.empty:
        if not measured:
            return [("Not measured: no ok timing run to project from.", "#projection")]
        said = ", ".join(map(str, sorted(measured)))
        return [(f"Not measured: ok timing runs at {said} device{'s' if said != '1' else ''} only; a projection "
                 "needs runs at 1 and 2 devices.", "#projection")]
    top = max(measured) if measured else 1
    ns = [n for n in sorted(p["devices"].unique()) if n > top] or [int(p["devices"].max())]
    fws = [f for f in FRAMEWORK_ORDER if f in set(p["framework"])] + sorted(set(p["framework"]) - set(FRAMEWORK_ORDER))
    c = check(v)
    fails = bool(c and c["fails"])
    parts = []
    if c is None:
        reason = v["reason"].dropna().iloc[0] if len(v) and "reason" in v and v["reason"].notna().any() \
            else "no multi-device point of its own"
        parts.append((f"Unchecked ({reason}): ", None))
    elif fails:
        which = "/".join(map(str, sorted(c["rows"]["devices"].unique())))
        parts += [("Not reliable: ", None), (f"{c['inside']} of {c['n']}", VALIDATION_ANCHOR),
                  (f" measured {which}-device points inside their intervals, median error "
                   f"{100 * c['median_error']:.0f} %; it gives ", None)]
    # the first count beyond those measured only: the sentence stays short, the table has the rest
    n = ns[0]
    parts.append((f"{n} devices: ", None))
    for i, fw in enumerate(f for f in fws if ((p["framework"] == f) & (p["devices"] == n)).any()):
        r = middle(p[(p["framework"] == fw) & (p["devices"] == n)], "speedup")
        parts += [(("" if i == 0 else ", ") + f"{framework_label(fw)} ", None),
                  (f"{r['speedup']:.1f}×", "#" + projection_anchor(r))]
        if pd.notna(r.get("speedup_low")):
            parts.append((f" ({'95% ' if i == 0 else ''}{r['speedup_low']:.1f}–{r['speedup_high']:.1f})", None))
    parts.append((" over 1 (median configuration)", None))
    over = _oversubscribed(p)
    if over:
        parts.append((f"; {over}", None))
    if c is not None and not fails:
        counts = sorted(c["rows"]["devices"].unique())
        which = "/".join(map(str, counts))
        parts += [(f"; checked on the measured {which}-device points: ", None),
                  (f"{c['inside']} of {c['n']}", VALIDATION_ANCHOR),
                  (f" inside their intervals, median error {100 * c['median_error']:.0f} %", None)]
    parts.append((".", None))
    return parts


def _ms_text(v) -> str | None:
    from analysis.formatting import fmt_duration

    return None if v is None or pd.isna(v) else fmt_duration(float(v))


def _stop_text(r) -> str:
    stops = [w for w, hit in (("CPU oversubscribed", r.get("beyond_cpu")), ("host memory", r.get("beyond_memory")))
             if hit is True or hit == 1]
    return ", ".join(stops) or ""


def projection_frame(p: pd.DataFrame) -> pd.DataFrame:
    """The projection rows with readable columns, times in ms/s."""
    from analysis import framework_label, model_label

    if p.empty:
        return pd.DataFrame()
    rows = []
    for r in p.to_dict("records"):
        rows.append({"experiment": r["experiment"], "framework": framework_label(r["framework"]),
                     "model": model_label(r["model"]), "batch": r["batch_size"], "workers": r["workers"],
                     "devices": r["devices"], "epoch time (model)": _ms_text(r["predicted_s"]),
                     "95% interval": f"{_ms_text(r['low_s'])} – {_ms_text(r['high_s'])}",
                     "measured": _ms_text(r["measured_s"]), "speed-up": f"{r['speedup']:.2f}×",
                     "speed-up 95%": (f"{r['speedup_low']:.2f}–{r['speedup_high']:.2f}×"
                                      if r["devices"] != 1 and pd.notna(r.get("speedup_low")) else None),
                     "steps": r["steps"], "local": _ms_text(r["local_s"]), "waiting": _ms_text(r["wait_s"]),
                     "all-reduce": _ms_text(r["allreduce_s"]), "outside steps": _ms_text(r["outside_s"]),
                     "contention from": r["contention_from"], "past": _stop_text(r)})
    return pd.DataFrame(rows)


def validation_frame(v: pd.DataFrame) -> pd.DataFrame:
    """The validation rows with readable columns: measured beside predicted without its own runs."""
    from analysis import framework_label, model_label

    if v.empty:
        return pd.DataFrame()
    rows = []
    for r in v.to_dict("records"):
        done = pd.isna(r.get("reason"))
        rows.append({"experiment": r["experiment"], "framework": framework_label(r["framework"]),
                     "model": model_label(r["model"]), "batch": r["batch_size"], "workers": r["workers"],
                     "devices": r["devices"], "runs": r.get("n_runs") if done else None,
                     "measured": _ms_text(r.get("measured_s")), "predicted": _ms_text(r.get("predicted_s")),
                     "95% interval": f"{_ms_text(r['low_s'])} – {_ms_text(r['high_s'])}" if done else None,
                     "error": f"{100 * r['error']:+.0f}%" if done else None,
                     "inside": ("yes" if r["inside"] else "NO") if done else None,
                     "ideal T(1)/N error": f"{100 * r['ideal_error']:+.0f}%" if done else None,
                     "from": r.get("base") if done else None,
                     "not predicted": None if done else r["reason"]})
    return pd.DataFrame(rows)


def report_tables(res: dict | None) -> dict:
    """name -> TableSet: the projection (every experiment) and its out-of-sample validation."""
    res = res or {}
    p, v = res.get("projection", pd.DataFrame()), res.get("validation", pd.DataFrame())
    n = ", ".join(map(str, REPORT_DEVICES))
    proj = frame_table(
        projection_frame(p), "projection", "Projected epoch time and speed-up at more devices",
        f"Per timing configuration and device count (measured ones and {n}): the slowest rank's steady epoch "
        "time as the model gives it (analysis/project.py: the 1-device runs' phases per step, slowed per rank as "
        "the second rank slowed them, waiting for the slowest rank, the ring all-reduce), its 95% interval "
        "(bootstrap over runs, contention pool, all-reduce fit and launch noise), the measured mean where there "
        "is one, the speed-up over 1 device with its paired interval, and the model's parts per epoch. 'past': "
        "a count beyond which the model no longer holds (more processes than cores, host memory).",
        empty_text="Nothing projected: no configuration has ok timing runs at 1 device with a 1 -> 2 contention "
                   "measured anywhere.", group_col="experiment",
        row_id=[projection_anchor(r) for r in p.to_dict("records")] if len(p) else None)
    proj.data = p
    val = frame_table(
        validation_frame(v), "projection_validation", "The projection checked on the measured points",
        "Every measured multi-device point predicted out of sample, without its own multi-device runs (from "
        "its 1-device runs, the all-reduce model and the other configurations' 1 -> 2 contention), beside the "
        "measured mean; 'inside': the measured mean lies in the 95% interval; the ideal T(1)/N is the naive "
        "prediction the model has to beat. " + verdict(v, _common(p, v)),
        empty_text="No multi-device point to check against.", group_col="experiment")
    val.data = v
    return {"projection": proj, "projection_validation": val}


def page_notes(res: dict | None, runs: pd.DataFrame, exp) -> dict:
    """What the section says besides the answer: `line` (nothing measured beyond the largest
    count on this host, where it is oversubscribed, where the all-reduce cost comes from) and
    `assumptions` (the model's, its interval's and its notes)."""
    res = res or {}
    p, _ = of_experiment(res, exp)
    ok = runs[(runs["experiment"] == exp) & (runs["status"] == "ok")] if exp is not None and len(runs) else runs
    top = int(ok["devices"].max()) if len(ok) else 0
    hosts = sorted({str(h) for h in ok.get("env_hostname", pd.Series(dtype=object)).dropna()})
    where = f"host {hosts[0]}" if len(hosts) == 1 else "this host" if not hosts else f"hosts {', '.join(hosts)}"
    coll = res.get("collectives")
    source = (f"all-reduce from the micro-benchmark {coll['source']}" if coll else
              "all-reduce from the 2-device runs (no micro-benchmark beside the aggregate)")
    # short: where the host is oversubscribed (and the model stops holding), the answer says
    line = (f"Projected: nothing beyond {top} device{'s' if top != 1 else ''} ran on {where}; {source}."
            if len(p) else "")
    sd = res.get("noise_sd")
    extra = [f"interval: bootstrap over the runs, the contention pool and the all-reduce fit's errors, with the "
             f"pooled launch noise (SD {100 * sd:.1f}% of an epoch)"] if sd is not None else []
    return {"line": line, "assumptions": [*res.get("assumptions", []), *extra, *(res.get("notes") or [])]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.project", description=__doc__.split("\n\n")[0])
    ap.add_argument("--aggregate", default="results/aggregate", help="an aggregate directory (runs.csv, ...)")
    ap.add_argument("--devices", default="4,8,16", help="device counts to project to, comma-separated")
    ap.add_argument("--collectives", default=None,
                    help="benchmarks/collectives.py's JSON (alpha-beta fit); default: the one beside the aggregate "
                    "(../benchmarks/collectives.json) if there is one, else alpha from the measured runs")
    ap.add_argument("--draws", type=int, default=BOOTSTRAP, help="bootstrap draws for the intervals")
    args = ap.parse_args(argv)
    try:
        devices = parse_devices(args.devices)
    except ValueError as exc:
        ap.error(str(exc))
    if args.collectives and not Path(args.collectives).is_file():
        ap.error(f"--collectives {args.collectives!r}: no such file (python -m benchmarks.collectives writes it)")
    if not (Path(args.aggregate) / "runs.csv").is_file():
        ap.error(f"--aggregate {args.aggregate!r}: no runs.csv there (python -m analysis.aggregate writes it)")
    res = project_aggregate(args.aggregate, devices, args.collectives or "auto", args.draws)
    print(format_tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
