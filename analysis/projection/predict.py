"""What more devices would give: a configuration's epoch time at N devices, projected from its
measured breakdown, and the projection checked out of sample on the device counts measured.

Per configuration (experiment x framework x model x batch size b x loader workers) and N ranks,
the slowest rank's steady epoch time is modelled as

    T(N) = S(N) [ L(N) (1 + w_N) + A(N) ] + O g_out(N)
    S(N) = min(ceil(seeds / (b N)), max_steps)       steps per rank (runners.rank.seeds.split_seeds
                                                      pads one permutation to an equal share)
    L(N) = sum_p phi_p g_p(N) u_p(N)                 a rank's local step: loader wait, preparation,
                                                      copy, forward, backward, optimizer
    u_p(N) = seeds per step at N / at 1              (1 for the optimizer: it updates every parameter)
    g_p(N) = max(min(1, r_p), 1 + (r_p - 1)(N - 1))  contention, r_p measured from 1 to 2 devices
    w_N = E[max of N step draws] / E[step] - 1       waiting for the slowest rank
    A(N) = k 2(N-1) alpha + 2(N-1)/N n beta          ring all-reduce of n gradient bytes in k buckets
    O                                                the 1-device epoch's time outside its steps

phi_p are the 1-device per-step phase times (analysis.projection.speedup_gap.run_profiles: slowest rank,
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
micro-benchmark measured alone. The inputs' interval is the 2.5-97.5% percentile of a bootstrap
over the repeats (runs) of each side, over the configurations the contention is pooled from, over
the all-reduce fit's relative errors, plus the pooled launch noise (analysis.repeats.noise) of the mean of
the runs predicted; the speed-up's interval pairs each draw's T(1) with its T(N), with one launch's
noise at each end. It carries no error of the model itself, so on a quiet machine it is narrow
around a prediction that may be 20 % off: calibrate() widens it to a split-conformal quantile of
the out-of-sample errors (90 %; times N - 1 at N devices) wherever enough points were held out. Where 3+ device counts are measured the Universal Scalability Law
C(N) = N / (1 + sigma (N-1) + kappa N (N-1)) is fitted (kappa > 0: retrograde scaling).

    python -m analysis.projection --aggregate results/aggregate --devices 4,8,16 \
        [--collectives results/benchmarks/collectives.json]

(its command line: analysis/projection/__main__.py). The report (analysis.report) calls
project() on the aggregate it holds in memory, projects to REPORT_DEVICES, and states the
answer (answer_parts), the tables (report_tables) and what the projection rests on (page_notes)
for its main experiment (analysis.projection.text, in words). The model's formulas are in
analysis.projection.formulas, what it stands on in analysis.projection.inputs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import PHASE_COLUMNS
from analysis.projection.formulas import LOADER_PHASES, OUTSIDE, epoch_time, fit_usl, step_seeds, steps_at
from analysis.projection.inputs import (COL, CONFIG, CONTENDED, FIT_DEVICES, Measured, beyond_fit,  # noqa: F401
                                        collectives_notes, contention_pool, geomean_ratios, host_limits, inside,
                                        launch_noise_sd, load_collectives, parameter_count, relative_steps)
# analysis.report.render and analysis.report.answers read the page's parts as predict.*
from analysis.projection.text import (REPORT_DEVICES, answer_parts, of_experiment, page_notes,  # noqa: F401
                                      report_tables)

BOOTSTRAP = 400
ASSUMPTIONS = (
    "contention: each rank beyond the first slows every phase by the factor the second one did (linear in N-1, "
    "measured 1->2; a phase that got faster keeps its 2-device factor); the backward's compute slows as the forward",
    "waiting: ranks draw their step times independently from the 1-device runs' full-batch step distribution",
    "all-reduce: ring alpha-beta of the micro-benchmark, float32 gradients in DDP's buckets, not overlapped "
    "with the backward",
    "outside the steps: the 1-device epoch's time outside its steps, slowed like the phases",
    "work: a step's phases but the optimizer scale with its seeds (a rank's share smaller than a batch)",
    "the model holds while ranks x (1 + workers) <= cores and the replicated peak memory fits the host",
    "model error: the held-out 2-device points' errors are exchangeable with a new configuration's, and grow "
    "linearly in N - 1 past them (calibrated intervals only)",
)


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
        params = self.runs.apply(parameter_count, axis=1).dropna()
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
        out = geomean_ratios(rs)
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
        m = one.sum(axis=0) / len(one)  # ndarray.mean's figure, without its per-call overhead
        return {p: m[COL[p]] for p in (*PHASE_COLUMNS, OUTSIDE)}

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


def _label(key) -> dict:
    """A configuration key as its CONFIG columns."""
    return dict(zip(CONFIG, key))



# The model's parts of a projection row, besides the epoch time.
PARTS = ("steps", "local_s", "wait_s", "allreduce_s", "outside_s", "gradient_bytes", "alpha_s", "beta_s_per_byte",
         "allreduce_source", *(f"r_{c}" for c in CONTENDED))


class _Projector:
    """project()'s steps on one set of measured runs, per configuration: its projection, its
    out-of-sample validation and its USL fit; and the in-sample terms of every configuration."""

    def __init__(self, meas: Measured, coll: dict | None, devices, draws: int):
        self.meas, self.coll, self.devices, self.draws = meas, coll, devices, draws
        self.sd = launch_noise_sd(meas.runs)
        self.cfg = meas.runs[list(CONFIG)].apply(tuple, axis=1)

    def _speedup_draws(self, sims: np.ndarray, one: int) -> np.ndarray:
        # the speed-up's interval pairs each draw's T(1) with its T(n) (the runs and contention they
        # share cancel); the common launch noise cancels too, so one launch's noise at each end is added
        return sims[:, [one]] / sims * np.exp(np.random.default_rng(1).normal(
            0.0, self.sd * math.sqrt(2), sims.shape)) if self.sd else sims[:, [one]] / sims

    def projection_rows(self, key, stops: dict) -> list:
        """The configuration at every device count asked for or measured, from its own 1 -> 2
        contention where measured (none where it is projected from a twin's 1-device runs)."""
        meas, counts = self.meas, self.meas.device_counts(key)
        own = meas.ratios(key) is not None
        pool = contention_pool(meas, key, exclude_self=False)
        if meas.base_for(key) != key or not (own or pool):
            return []
        model = Model(meas, key, pool, own, self.coll, draws=self.draws)
        ns = sorted(set(self.devices) | set(counts))
        sims = model.draws_at(ns, self.sd, 1)
        t1 = model.point(1)["epoch_s"]
        ratio = self._speedup_draws(sims, ns.index(1))
        rows = []
        for j, n in enumerate(ns):
            pt = model.point(n)
            lo, hi = np.percentile(sims[:, j], [2.5, 97.5])
            slo, shi = np.percentile(ratio[:, j], [2.5, 97.5]) if n != 1 else (1.0, 1.0)
            measured = meas.profiles(key, n)[:, COL["T"]].mean() if n in counts else math.nan
            rows.append({**_label(key), "devices": n, "predicted_s": pt["epoch_s"], "low_s": lo, "high_s": hi,
                         "measured_s": measured, "speedup": t1 / pt["epoch_s"], "speedup_low": slo,
                         "speedup_high": shi, "efficiency": t1 / pt["epoch_s"] / n, **{k: pt[k] for k in PARTS},
                         "contention_from": "its own 1->2 runs" if own else f"{len(pool)} other configurations",
                         "beyond_cpu": n >= stops["oversubscribed_from"],
                         "beyond_memory": n >= stops.get("memory_measured_from", math.inf), **stops})
        return rows

    def validation_rows(self, key, base) -> list:
        """Every measured multi-device point of the configuration, predicted without its own
        multi-device runs (`base`: the configuration whose 1-device runs it stands on)."""
        vpool = contention_pool(self.meas, key, exclude_self=True)
        rows = []
        for d in (c for c in self.meas.device_counts(key) if c > 1):
            if not vpool:
                rows.append({**_label(key), "devices": d, "reason": "no other configuration measured 1 -> 2"})
                continue
            rows.append(self._validation_row(key, base, d, vpool))
        return rows

    def _validation_row(self, key, base, d: int, vpool: list) -> dict:
        """The point at d devices: the model from `vpool`'s contention, its interval, the measured mean."""
        meas = self.meas
        model = Model(meas, key, vpool, False, self.coll, draws=self.draws)
        point = meas.profiles(key, d)
        pt = model.point(d)
        # the launch noise, too, is pooled without this configuration's multi-device runs
        vsd = launch_noise_sd(meas.runs[~(self.cfg.map(lambda c: c == key) & (meas.runs["devices"] > 1))])
        sims = model.draws_at([d], vsd, len(point))[:, 0]
        lo, hi = np.percentile(sims, [2.5, 97.5])
        m = point[:, COL["T"]].mean()
        ideal = meas.profiles(base, 1)[:, COL["T"]].mean() / d  # the naive prediction the model must beat
        # where the error sits: the steps' loader part, the rest of the steps (compute, all-reduce and
        # waiting, which the backward holds together), and the time outside the steps, per epoch
        loader = (point[:, COL["S"]] * sum(point[:, COL[p]] for p in LOADER_PHASES)).mean()
        outside = point[:, COL[OUTSIDE]].mean()
        miss = {"miss_loader_s": pt["loader_s"] - loader, "miss_outside_s": pt["outside_s"] - outside,
                "miss_steps_s": (pt["epoch_s"] - pt["loader_s"] - pt["outside_s"]) - (m - loader - outside)}
        return {**_label(key), "devices": d, "n_runs": len(point), "measured_s": m, "predicted_s": pt["epoch_s"],
                "ideal_s": ideal, "ideal_error": ideal / m - 1,
                "low_s": lo, "high_s": hi, "error": pt["epoch_s"] / m - 1, "inside": inside(m, lo, hi),
                "steps_model": pt["steps"], "steps_measured": point[:, COL["S"]].mean(),
                "contention_pool": len(vpool), "allreduce_source": pt["allreduce_source"], **miss,
                "base": "its own 1-device runs" if base == key else f"1-device runs of: {base[0]}",
                "reason": None}

    def usl_row(self, key) -> dict:
        """The USL fitted to the configuration's measured epoch times (3+ device counts)."""
        counts = self.meas.device_counts(key)
        per = [self.meas.profiles(key, d)[:, COL["T"]].mean() for d in counts]
        return {**_label(key), "device_counts": ",".join(map(str, counts)), **fit_usl(counts, per)}

    def terms(self) -> list:
        """In sample: which term of the 2-device step the model misses, per configuration."""
        rows = []
        for key in self.meas.configs:
            r = self.meas.ratios(key)
            if r is None:
                continue
            model = Model(self.meas, key, [key], True, self.coll, draws=1)
            pt = model.point(2)
            rows.append({**_label(key), "residual_step_s": r["residual_s"], "wait_step_s": r["wait2_s"],
                         "allreduce_step_s": pt["allreduce_s"] / pt["steps"],
                         **{f"r_{c}": r[c] for c in CONTENDED}})
        return rows


# -- the model's own error: intervals calibrated on the held-out points ------------------------------

# The coverage the calibrated intervals aim at. A split-conformal interval at level 1 - a needs
# ceil((n + 1)(1 - a)) <= n held-out errors: 9 for 90 % (19 for 95 %, more than a default sweep's 12).
CALIBRATION_LEVEL = 0.90


def conformal_quantile(scores, level: float = CALIBRATION_LEVEL) -> float:
    """The split-conformal quantile of `scores`: their ceil((n + 1) level)-th smallest, so that a new
    score exchangeable with them is at most it with probability >= level; inf where n is too small."""
    s = sorted(float(x) for x in scores if x == x)
    k = math.ceil((len(s) + 1) * level)
    return s[k - 1] if 0 < k <= len(s) else math.inf


def calibrate(proj: pd.DataFrame, val: pd.DataFrame, level: float = CALIBRATION_LEVEL) -> dict:
    """Intervals that carry the model's own error, not only the noise of its inputs.

    A held-out point's score is its absolute log error |log(predicted / measured)|. Each validation
    point's interval is widened to its prediction x exp(+-q), q the conformal quantile of the scores
    of the other configurations' points (leave one configuration out), where the bootstrap's is
    narrower; `inside` then says whether the measured mean lies in that interval (the bootstrap's
    verdict stays as `inside_noise`). A projection at N devices is widened by q of every held-out
    point times N - 1: the 2-device error comes from one rank's contention, which the model
    extrapolates linearly in N - 1. Where too few points are held out, nothing is widened and
    `calibrated` is False. Returns {projection, validation, calibration: {level, n, q, calibrated, needed}}."""
    val, proj = val.copy(), proj.copy()
    done = val["reason"].isna() if len(val) and "reason" in val else pd.Series(False, index=val.index)
    scores = (np.log(val["predicted_s"] / val["measured_s"]).abs() if done.any() else pd.Series(dtype=float))
    q_all = conformal_quantile(scores[done], level) if done.any() else math.inf
    info = {"level": level, "n": int(done.sum()), "q": q_all, "calibrated": bool(np.isfinite(q_all)),
            "needed": next(n for n in range(1, 1000) if math.ceil((n + 1) * level) <= n)}
    if not info["calibrated"]:
        return {"projection": proj, "validation": val, "calibration": info}
    keys = val[list(CONFIG)].apply(tuple, axis=1)
    val["inside_noise"], val["noise_low_s"], val["noise_high_s"] = val.get("inside"), val.get("low_s"), val.get("high_s")
    for i in val.index[done]:
        key = keys[i]
        q = conformal_quantile(scores[done & keys.map(lambda k: k != key)], level)
        pred = val.at[i, "predicted_s"]
        val.at[i, "low_s"] = min(val.at[i, "low_s"], pred * math.exp(-q))
        val.at[i, "high_s"] = max(val.at[i, "high_s"], pred * math.exp(q))
        val.at[i, "inside"] = inside(val.at[i, "measured_s"], val.at[i, "low_s"], val.at[i, "high_s"])
    if len(proj):
        grow = q_all * (proj["devices"] - 1).clip(lower=0)
        proj["noise_low_s"], proj["noise_high_s"] = proj["low_s"], proj["high_s"]
        proj["low_s"] = np.minimum(proj["low_s"], proj["predicted_s"] * np.exp(-grow))
        proj["high_s"] = np.maximum(proj["high_s"], proj["predicted_s"] * np.exp(grow))
        proj["speedup_low"] = np.minimum(proj["speedup_low"], proj["speedup"] * np.exp(-grow))
        proj["speedup_high"] = np.maximum(proj["speedup_high"], proj["speedup"] * np.exp(grow))
    return {"projection": proj, "validation": val, "calibration": info}


def project(runs: pd.DataFrame, epochs: pd.DataFrame, steps: pd.DataFrame, devices, collectives=None,
            draws: int = BOOTSTRAP) -> dict:
    """DataFrames: `projection` (per configuration and N: predicted epoch time, interval, parts,
    speed-up, where the model stops), `validation` (every measured multi-device point predicted
    without its own multi-device runs, beside the measured value), `usl` (fits where 3+ device
    counts were measured), and `assumptions`."""
    coll = load_collectives(collectives) if isinstance(collectives, (str, Path)) else collectives
    meas = Measured(runs, epochs, steps)
    job = _Projector(meas, coll, devices, draws)
    proj, val, usl = [], [], []
    for key, g in meas.configs.items():
        base = meas.base_for(key)
        if base is None:
            val += [{**_label(key), "devices": d, "reason": "no 1-device run to project from, in its experiment or "
                     "a twin differing only in the schedule"} for d in meas.device_counts(key) if d > 1]
            continue
        proj += job.projection_rows(key, host_limits(g))
        val += job.validation_rows(key, base)
        if len(meas.device_counts(key)) >= 3:
            usl.append(job.usl_row(key))
    usl_cols = [*CONFIG, "device_counts", "sigma", "kappa", "retrograde", "peak_devices"]
    return {**calibrate(pd.DataFrame(proj), pd.DataFrame(val)), "terms": pd.DataFrame(job.terms()),
            "usl": pd.DataFrame(usl, columns=usl_cols), "assumptions": list(ASSUMPTIONS),
            "collectives": coll, "noise_sd": job.sd, "notes": collectives_notes(coll, meas.runs)}


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
    # a kept sweep (benchmarks.keep_sweep) stores its larger tables gzipped
    runs, epochs, steps = (pd.read_csv(d / f"{n}.csv" if (d / f"{n}.csv").exists() else d / f"{n}.csv.gz",
                                       low_memory=False) for n in ("runs", "epochs", "steps"))
    return project(runs, epochs, steps, devices, collectives, draws)
