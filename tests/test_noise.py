"""Launch noise pooled over configurations (analysis.repeats.noise) and the intervals built on it."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis import stats
from analysis.repeats.noise import pooled_noise


def _runs(sd_by_framework: dict, repeats=2, seed=0, configs=((1, 256), (1, 1024), (2, 256), (2, 1024))) -> pd.DataFrame:
    """Epoch times of ok runs: framework x (devices, batch) x repeats, log-normal around 1 s (PyG
    3x DGL) with the given launch noise (SD of log time) per framework."""
    rng = np.random.default_rng(seed)
    rows = []
    for fw, sd in sd_by_framework.items():
        for devices, batch in configs:
            for r in range(repeats):
                t = (3.0 if fw == "pyg" else 1.0) * math.exp(rng.normal(0, sd))
                rows.append({"experiment": "e", "framework": fw, "model": "sage", "devices": devices,
                             "batch_size": batch, "workers": 0, "repeat": r, "status": "ok", "t": t})
    return pd.DataFrame(rows)


def test_pooled_sd_is_the_dof_weighted_variance_of_the_cells():
    runs = _runs({"pyg": 0.1, "dgl": 0.1})
    noise = pooled_noise(runs, "t")
    logs = runs.assign(l=np.log(runs["t"])).groupby(["framework", "devices", "batch_size"])["l"]
    expected = math.sqrt(((logs.transform("mean") - np.log(runs["t"])) ** 2).sum() / 8)
    assert len(noise.groups) == 1
    g = noise.groups[0]
    assert (g.dof, g.cells) == (8, 8)
    assert g.sd == pytest.approx(expected)


def test_a_pooled_interval_rests_on_all_cells_and_is_narrower_than_two_plus_two_welch():
    runs = _runs({"pyg": 0.1, "dgl": 0.1}, configs=[(d, b) for d in (1, 2, 4) for b in (64, 256, 1024)])
    noise = pooled_noise(runs, "t")
    cell = {"experiment": "e", "model": "sage", "devices": 1, "batch_size": 256, "workers": 0}
    a = runs[(runs["framework"] == "pyg") & (runs["devices"] == 1) & (runs["batch_size"] == 256)]["t"]
    b = runs[(runs["framework"] == "dgl") & (runs["devices"] == 1) & (runs["batch_size"] == 256)]["t"]
    pair = noise.pair({**cell, "framework": "pyg"}, {**cell, "framework": "dgl"})
    est, lo, hi, dof = stats.ratio_interval_dof(a, b, pair)
    _, wlo, whi = stats.ratio_interval(a, b)
    assert dof == 18  # one pool: 18 cells of 2, not the 1-2 dof of one comparison
    assert lo < est < hi and lo < 3.0 < hi
    assert hi / lo < whi / wlo


def test_one_repeat_a_side_gets_an_interval_from_the_pool():
    runs = _runs({"pyg": 0.1, "dgl": 0.1})
    noise = pooled_noise(runs, "t")
    cell = {"experiment": "e", "model": "sage", "devices": 2, "batch_size": 1024, "workers": 0}
    _, lo, hi = stats.ratio_interval([3.0], [1.0], noise.pair({**cell, "framework": "pyg"},
                                                                {**cell, "framework": "dgl"}))
    assert lo < 3.0 < hi and not math.isnan(lo)
    assert math.isnan(stats.ratio_interval([3.0], [1.0])[1])  # Welch alone gives none


def test_unequal_spreads_are_pooled_apart_and_named():
    runs = _runs({"pyg": 0.01, "dgl": 0.3}, repeats=4)
    noise = pooled_noise(runs, "t")
    groups = {g.label(): g for g in noise.groups}
    assert set(groups) == {"framework pyg", "framework dgl"}, noise.describe()
    assert groups["framework pyg"].sd < 0.03 < 0.15 < groups["framework dgl"].sd
    table = noise.describe()
    assert list(table["group"]) == ["framework pyg", "framework dgl"]


def test_equal_spreads_stay_one_pool():
    runs = _runs({"pyg": 0.1, "dgl": 0.1}, repeats=4, seed=3)
    assert [g.label() for g in pooled_noise(runs, "t").groups] == ["all configurations"]


def test_combined_ratio_narrows_with_configurations_and_keeps_the_pooled_dof():
    one = (2.0, 1.6, 2.5, 30.0)
    est, lo, hi = stats.combined_ratio([one] * 9)
    assert est == pytest.approx(2.0)
    # Nine independent configurations: the interval's half-width on the log scale shrinks by 3.
    assert math.log(hi / lo) == pytest.approx(math.log(2.5 / 1.6) / 3, rel=1e-6)
    assert math.isnan(stats.combined_ratio([(2.0, float("nan"), float("nan"), float("nan"))])[0])


def test_coverage_counts_intervals_that_contain_the_all_launch_ratio():
    """benchmarks.coverage's arithmetic on 12 launches a cell of known noise: both methods cover
    about 95%, and the pooled interval is the narrower (it rests on every cell's launches)."""
    from benchmarks.coverage import coverage

    runs = _runs({"pyg": 0.1, "dgl": 0.1}, repeats=12, seed=5, configs=((1, 1024), (2, 1024)))
    runs = runs.assign(steady_epoch_time_s=runs["t"], experiment="coverage")
    figures = coverage(runs, draws=300)
    assert figures["comparisons"] == 2 and figures["intervals"] == 600
    assert all(0.85 <= figures[f"{m}_coverage"] <= 1.0 for m in ("blocks", "pooled", "welch"))
    assert figures["pooled_median_width"] < figures["welch_median_width"]
    # No drift between the rounds here: the block fit pays a little dof for nothing, no more.
    assert figures["blocks_median_width"] < 1.15 * figures["pooled_median_width"]


def _drifting(shifts: list, sd: float = 0.02, seed: int = 1, extra=None) -> pd.DataFrame:
    """PyG (3 s) and DGL (1 s) at 4 configurations, one repeat per block; every run of block r is
    slowed by exp(shifts[r]) (a machine that drifts between blocks) plus launch noise `sd`.
    `extra`: (framework, devices, batch, repeat) of runs added on their own."""
    rng = np.random.default_rng(seed)
    rows = []
    cells = [(fw, d, b) for fw in ("pyg", "dgl") for d in (1, 2) for b in (256, 1024)]
    todo = [(fw, d, b, r) for r in range(len(shifts)) for fw, d, b in cells] + list(extra or [])
    for fw, d, b, r in todo:
        t = (3.0 if fw == "pyg" else 1.0) * math.exp(shifts[r] + rng.normal(0, sd))
        rows.append({"experiment": "e", "framework": fw, "model": "sage", "devices": d, "batch_size": b,
                     "workers": 0, "repeat": r, "status": "ok", "t": t})
    return pd.DataFrame(rows)


def _cell(fw, d, b):
    return {"experiment": "e", "framework": fw, "model": "sage", "devices": d, "batch_size": b, "workers": 0}


def test_a_drift_between_blocks_is_taken_out_of_the_noise_and_the_intervals():
    runs = _drifting([0.0, 0.4, -0.3])
    noise = pooled_noise(runs, "t")
    g = noise.groups[0]
    assert g.sd > 0.2  # the drift, seen as launch noise without blocks
    assert g.fit.sd < 0.04 and g.fit.dof == 24 - 8 - 2
    a, b = _cell("pyg", 1, 256), _cell("dgl", 1, 256)
    pick = lambda c: runs[(runs.framework == c["framework"]) & (runs.devices == 1) & (runs.batch_size == 256)]["t"]  # noqa: E731
    est, lo, hi, dof = noise.ratio(a, b, pick(a), pick(b))
    assert lo < 3.0 < hi and hi / lo < 1.1
    assert dof == g.fit.dof
    # Without the block columns every run is its own block: the drift is noise again.
    est2, lo2, hi2, _ = pooled_noise(runs.drop(columns="repeat"), "t").ratio(a, b, pick(a), pick(b))
    assert hi2 / lo2 > 1.5 and lo2 < 3.0 < hi2


def test_an_extra_run_in_a_slow_block_does_not_bias_the_ratio():
    # One more PyG run, alone with one DGL run in a block 60% slower than the others.
    runs = _drifting([0.0, 0.0, 0.47], sd=0.001, extra=[])
    runs = runs[(runs.repeat < 2) | ((runs.devices == 1) & (runs.batch_size == 256))]
    runs = pd.concat([runs, _drifting([0.0, 0.0, 0.47], sd=0.001, extra=[("pyg", 1, 256, 2)])
                      .tail(1)], ignore_index=True)
    a, b = _cell("pyg", 1, 256), _cell("dgl", 1, 256)
    ta = runs[(runs.framework == "pyg") & (runs.devices == 1) & (runs.batch_size == 256)]["t"]
    tb = runs[(runs.framework == "dgl") & (runs.devices == 1) & (runs.batch_size == 256)]["t"]
    raw = stats.ratio_interval(ta, tb)[0]
    est, lo, hi, _ = pooled_noise(runs, "t").ratio(a, b, ta, tb)
    assert abs(math.log(raw / 3.0)) > 0.02  # the slow block's 2 PyG runs to 1 DGL run pull the raw ratio
    assert est == pytest.approx(3.0, rel=0.005)


def test_cells_that_never_share_a_block_fall_back_to_the_spread_without_blocks():
    runs = _drifting([0.0, 0.3])
    # PyG ran only in block 0 and DGL only in block 1: the blocks cannot be told from the frameworks.
    runs = runs[((runs.framework == "pyg") & (runs.repeat == 0)) | ((runs.framework == "dgl") & (runs.repeat == 1))]
    runs = pd.concat([runs, runs.assign(t=runs["t"] * 1.01)], ignore_index=True)
    noise = pooled_noise(runs, "t")
    a, b = _cell("pyg", 1, 256), _cell("dgl", 1, 256)
    ta = runs[(runs.framework == "pyg") & (runs.devices == 1) & (runs.batch_size == 256)]["t"]
    tb = runs[(runs.framework == "dgl") & (runs.devices == 1) & (runs.batch_size == 256)]["t"]
    assert noise.groups[0].fit.contrast(tuple(a.get(k) for k in noise.cell_keys),
                                        tuple(b.get(k) for k in noise.cell_keys)) is None
    assert noise.ratio(a, b, ta, tb) == stats.ratio_interval_dof(ta, tb, noise.pair(a, b))
