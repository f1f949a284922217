"""When a timing run has measured enough: the stop rule for the steady-state epoch time.

A timing run asks one question, how long a steady-state epoch takes, and that number is
known long before an accuracy schedule ends. After the warm-up epoch(s) the run trains until
the 95 % confidence interval of its mean steady-state epoch time is within a relative
half-width (default 3 %), with a floor of steady epochs and caps on epochs and seconds.

Why epoch times, not step times: consecutive steps are autocorrelated (prefetched batches,
allocator and cache state, loader workers running ahead), so a t-interval over steps would
be far too narrow. An epoch is the natural batch of the batch-means method: a whole pass over
the rank's seeds, whose sum absorbs the step-to-step dependence, and it is the quantity the
report states (the slowest rank's epoch, which includes waiting in the all-reduce). The lag-1
autocorrelation of the epoch series is recorded so that this assumption can be checked.

A series that still trends is not called precise even when its interval is narrow: an
ordinary least-squares slope over the steady epochs that is significant (two-sided t-test at
5 %) and moved the epoch time over the window by more than the interval's half-width is
"drift": the interval would describe a level the series has already left.

Every rank evaluates the same rule on the same numbers (each epoch's slowest-rank time,
shared by an all-reduce), so all ranks stop after the same epoch. Pure Python plus scipy's
t quantiles; the analysis uses the same functions to plan repeats and epochs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

UNTIL = ("precise", "epochs")  # precise: the stop rule below; epochs: the fixed schedule
WARMUP_EPOCHS = 1  # epochs reported as warm-up, outside the steady-state figures
CONFIDENCE = 0.95
RULE_TEXT = ("mean of the steady-state epoch times (slowest rank per epoch, warm-up excluded): stop when "
             "the 95% t-interval half-width / mean <= the target, after at least the floor of steady epochs, "
             "unless an OLS slope over them is significant at 5% and moved the epoch time by more than the "
             "half-width (drift); otherwise stop at the epoch or seconds cap")


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student t quantile (e.g. 4.30 for df=2 at 95 %)."""
    # scipy.special's inverse of the t CDF, not scipy.stats.t.ppf (the same number): importing
    # scipy.stats takes about 0.9 s, and every timing run's launcher and ranks pay it once.
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2))


@dataclass(frozen=True)
class StopRule:
    """The settings of the stop rule (recorded with every result)."""

    until: str = "precise"
    precision: float = 0.03  # target relative half-width of the 95 % interval
    # 4, not 3: over three epochs a steady ramp cannot be told from noise (its interval's
    # half-width, 2.5 slopes, exceeds the 2 slopes it moves), from four on the trend test sees it.
    min_steady_epochs: int = 4
    max_epochs: int = 30
    max_train_s: float = 0.0  # 0: no cap in seconds
    warmup_epochs: int = WARMUP_EPOCHS

    def to_json(self) -> dict:
        return {**asdict(self), "rule": RULE_TEXT if self.until == "precise" else "fixed schedule of max_epochs"}


def assess(epoch_times: list, precision: float = 0.03, warmup: int = WARMUP_EPOCHS) -> dict:
    """Precision and drift of the steady-state part of `epoch_times` (seconds per epoch).

    Returns the number of steady epochs, their mean (steady_epoch_mean_s), the 95 % interval
    (absolute, and as a relative half-width: precision_reached), the OLS drift over the window (relative to the mean), whether it is
    significant, the lag-1 autocorrelation and `precise`: interval within `precision` and no
    drift. Values that need more epochs than there are are None.
    """
    steady = [float(t) for t in epoch_times[warmup:]]
    n = len(steady)
    out = {"steady_epochs": n, "steady_epoch_mean_s": None, "ci_low_s": None, "ci_high_s": None,
           "precision_reached": None, "drift_rel": None, "drift_significant": None, "drifting": None,
           "lag1_autocorr": None, "precise": False}
    if n == 0:
        return out
    mean = sum(steady) / n
    out["steady_epoch_mean_s"] = mean
    if n < 2 or mean <= 0:
        return out
    sd = math.sqrt(sum((x - mean) ** 2 for x in steady) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    out.update(ci_low_s=mean - half, ci_high_s=mean + half, precision_reached=half / mean)
    drifting = False
    if n >= 3:
        xs = range(n)
        xm = (n - 1) / 2
        sxx = sum((x - xm) ** 2 for x in xs)
        slope = sum((x - xm) * (y - mean) for x, y in zip(xs, steady)) / sxx
        resid = [y - (mean + slope * (x - xm)) for x, y in zip(xs, steady)]
        sse = sum(r * r for r in resid)
        se = math.sqrt(sse / (n - 2) / sxx) if sse > 0 else 0.0
        significant = (abs(slope) / se > t_quantile(n - 2)) if se > 0 else slope != 0
        drift_rel = slope * (n - 1) / mean  # how far the trend moved the epoch time over the window
        drifting = bool(significant and abs(drift_rel) > half / mean)
        out.update(drift_rel=drift_rel, drift_significant=bool(significant), drifting=drifting)
    if n >= 4:
        var = sum((x - mean) ** 2 for x in steady)
        out["lag1_autocorr"] = (sum((steady[i] - mean) * (steady[i + 1] - mean) for i in range(n - 1)) / var
                                if var > 0 else 0.0)
    out["precise"] = bool(out["precision_reached"] <= precision and not drifting)
    return out


TIME_CAP_FLOOR = 2  # steady epochs a timing run trains whatever its seconds cap


def decide(epoch_times: list, rule: StopRule) -> str | None:
    """Why training stops after the epochs in `epoch_times`, or None to train on.

    "schedule" (until=epochs: max_epochs done), "precise" (the rule is met), "epoch_cap" or
    "time_cap" (the caps stopped a run that was not yet precise). The time cap stops before
    an epoch that would likely end past it (the last epoch's time as the estimate), but never
    before TIME_CAP_FLOOR steady epochs: a timing run stopped on its warm-up epoch measured
    nothing (a slow configuration's warm-up alone can pass a short cap)."""
    done = len(epoch_times)
    if rule.until == "epochs":
        return "schedule" if done >= rule.max_epochs else None
    a = assess(epoch_times, rule.precision, rule.warmup_epochs)
    if a["steady_epochs"] >= rule.min_steady_epochs and a["precise"]:
        return "precise"
    if done >= rule.max_epochs:
        return "epoch_cap"
    if rule.max_train_s and a["steady_epochs"] >= TIME_CAP_FLOOR and sum(epoch_times) + epoch_times[-1] > rule.max_train_s:
        return "time_cap"
    return None
