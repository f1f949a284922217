"""The stop rule of timing runs (runners/rank/stopping.py) on series with known properties."""

import math

import numpy as np
import pytest

from runners.rank import stopping
from runners.rank.stopping import StopRule, assess, decide


def epochs_for(cv, precision, floor):
    """Steady epochs at which a t-interval at within-run CV `cv` first reaches `precision`."""
    n = floor
    while stopping.t_quantile(n - 1) * cv / math.sqrt(n) > precision:
        n += 1
    return n


def run_until_stop(series, rule):
    """Feed a series epoch by epoch as the harness does; returns (reason, epochs used)."""
    for n in range(1, len(series) + 1):
        reason = decide(series[:n], rule)
        if reason:
            return reason, n
    return None, len(series)


@pytest.mark.parametrize("cv", [0.01, 0.03, 0.06])
def test_known_variance_stops_when_the_interval_reaches_the_target(cv):
    """Independent epochs with CV `cv` (seeded): each run stops at the first epoch whose interval
    is within 3 % and not before; over many runs the epochs used sit where the t-interval
    arithmetic puts them, and the interval at the stop still covers the true mean."""
    rng = np.random.default_rng(7)
    rule = StopRule(until="precise", precision=0.03, min_steady_epochs=4, max_epochs=1000)
    used_all, covered = [], 0
    for _ in range(200):
        series = [3.0] + list(1.0 + cv * rng.standard_normal(999))  # warm-up epoch, then steady
        reason, used = run_until_stop(series, rule)
        assert reason == "precise"
        steady = np.asarray(series[1:used])
        half = stopping.t_quantile(len(steady) - 1) * steady.std(ddof=1) / math.sqrt(len(steady))
        assert half / steady.mean() <= 0.03  # precise when it stopped ...
        for k in range(4, len(steady)):  # ... and not at any earlier epoch past the floor
            earlier = assess(series[:1 + k], 0.03)
            assert earlier["precision_reached"] > 0.03 or earlier["drifting"]
        used_all.append(len(steady))
        covered += abs(steady.mean() - 1.0) <= half
    expected = epochs_for(cv, 0.03, floor=4)
    assert 0.6 * expected <= np.median(used_all) <= 1.5 * expected + 1
    assert covered / 200 >= 0.85  # stopping on a lucky streak costs little coverage


def test_floor_holds_for_a_perfectly_steady_series():
    series = [2.0] + [1.0] * 10
    rule = StopRule(until="precise", min_steady_epochs=3, max_epochs=11)
    assert run_until_stop(series, rule) == ("precise", 4)  # warm-up + 3 steady epochs


def test_drifting_series_is_not_called_precise():
    """An epoch time that grows 1 % per epoch with tiny noise: a narrow interval, but a trend."""
    rng = np.random.default_rng(3)
    steady = [1.0 + 0.01 * i + 0.001 * rng.standard_normal() for i in range(12)]
    a = assess([5.0] + steady, precision=0.03)
    assert a["precision_reached"] < 0.03  # the interval alone would pass ...
    assert a["drifting"] and a["drift_significant"] and a["drift_rel"] > 0.03
    assert not a["precise"]
    rule = StopRule(until="precise", max_epochs=13)  # default floor: 4 steady epochs
    assert run_until_stop([5.0] + steady, rule) == ("epoch_cap", 13)


def test_caps_stop_a_noisy_run_and_say_so():
    rng = np.random.default_rng(1)
    noisy = [1.0] + list(1.0 + 0.5 * np.abs(rng.standard_normal(50)))
    assert run_until_stop(noisy, StopRule(until="precise", max_epochs=6)) == ("epoch_cap", 6)
    reason, used = run_until_stop(noisy, StopRule(until="precise", max_epochs=50, max_train_s=8.0))
    assert reason == "time_cap" and sum(noisy[:used]) <= 8.0


def test_fixed_schedule_ignores_precision():
    assert run_until_stop([1.0] * 7, StopRule(until="epochs", max_epochs=5)) == ("schedule", 5)


def test_real_run_stops_by_the_rule_on_every_rank_alike(tmp_path):
    """A real 2-rank run with --until precise: every rank trains the same epochs, the result
    records why it stopped and what precision it reached, and it validates once, at the end."""
    import csv
    import json

    from tests.helpers import run_config

    out = tmp_path / "run"
    res = run_config(out, framework="dgl", epochs=12, extra=[
        "--until", "precise", "--precision", "0.5", "--min-steady-epochs", "3", "--eval-every", "end",
        "--max-steps-per-epoch", "2"])
    assert res.returncode == 0, res.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and not result.get("schema_errors")
    p = result["summary"]["precision"]
    per_rank = [list(csv.DictReader(open(out / f"rank{r}" / "epochs.csv"))) for r in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == p["epochs_run"]  # all ranks stopped together
    assert 4 <= p["epochs_run"] <= 12 and p["steady_epochs"] == p["epochs_run"] - 1
    assert p["stopped_by"] in ("precise", "epoch_cap")
    assert p["stopped_by_cap"] is (p["stopped_by"] == "epoch_cap")
    if p["stopped_by"] == "precise":
        assert p["precision_reached"] <= 0.5 and p["precise"]
    else:
        assert p["epochs_run"] == 12 and not p["precise"]
    assert [v["epoch"] for v in result["validation"]] == [p["epochs_run"] - 1]
    assert result["summary"]["learned"] in (True, False) and result["summary"]["converged"] is None


def test_bad_stop_settings_are_refused_by_name(tmp_path):
    from tests.helpers import run_config

    for extra, needle in ((["--until", "forever"], "--until 'forever'"),
                          (["--until", "precise", "--precision", "3"], "--precision 3.0"),
                          (["--until", "precise", "--epochs", "3"], "--epochs 3"),
                          (["--eval-every", "sometimes"], "--eval-every 'sometimes'")):
        args = list(extra)
        epochs = 2
        if "--epochs" in args:
            epochs = int(args.pop(args.index("--epochs") + 1))
            args.remove("--epochs")
        res = run_config(tmp_path / "bad", epochs=epochs, extra=args, timeout=120)
        assert res.returncode == 2 and needle in res.stdout, (extra, res.stdout[-800:])
        assert not (tmp_path / "bad" / "result.json").exists()


@pytest.mark.parametrize("df", [1, 2, 3.5, 7, 29.3, 1000])
def test_t_quantile_is_students(df):
    """The light quantile (scipy.special) is scipy.stats' t quantile, for Welch's fractional df too."""
    from scipy import stats

    assert stopping.t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-12)
    assert stopping.t_quantile(df, 0.9) == pytest.approx(stats.t.ppf(0.95, df), rel=1e-12)


def test_the_time_cap_waits_for_two_steady_epochs():
    """A configuration whose warm-up epoch alone passes the seconds cap still measures: the cap
    stops it after 2 steady epochs, not on its warm-up (a timing run with no steady epoch has no
    epoch time)."""
    slow = [5.0, 4.0, 4.0, 4.0, 4.0]
    assert run_until_stop(slow, StopRule(until="precise", max_epochs=4, min_steady_epochs=3, max_train_s=5.0)) \
        == ("time_cap", 3)
