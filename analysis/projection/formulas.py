"""The projection's formulas: a rank's steps per epoch, contention, waiting for the slowest rank,
the ring all-reduce in DDP's buckets, the epoch time they sum to, and the Universal Scalability
Law (analysis.projection.predict states the model these pieces make up)."""

from __future__ import annotations

import math

import numpy as np

from analysis import PHASE_COLUMNS

OUTSIDE = "outside_s"  # the epoch's time outside its steps
LOADER_PHASES = ("load_wait_s", "prepare_s")  # a step's loader part: waiting for the batch, unpacking it
FIRST_BUCKET_BYTES = 2**20  # torch DDP's first gradient bucket (_DEFAULT_FIRST_BUCKET_BYTES)
BUCKET_BYTES = 25 * 2**20   # DDP's bucket_cap_mb default; the harness keeps it


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
    local = loader = 0.0
    for p in PHASE_COLUMNS:
        factor = r.get("forward_s" if p == "backward_s" else p, 1.0)
        # the optimizer updates every parameter whatever the batch; the other phases scale with it
        t = base[p] * contention(factor, n) * (1.0 if p == "optimizer_s" else work)
        local += t
        loader += t if p in LOADER_PHASES else 0.0
    wait = local * wait_factor(rel_steps, n)
    ar = allreduce_s(n, nbytes, alpha, beta) * ar_scale
    outside = base[OUTSIDE] * contention(r.get(OUTSIDE, 1.0), n)
    total = steps * (local + wait + ar) + outside
    return {"epoch_s": total, "steps": steps, "local_s": steps * local, "wait_s": steps * wait,
            "allreduce_s": steps * ar, "outside_s": outside, "loader_s": steps * loader}


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
    """C(N) of the Universal Scalability Law."""
    return n / (1 + sigma * (n - 1) + kappa * n * (n - 1))
