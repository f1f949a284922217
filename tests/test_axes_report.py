"""The report reads every axis of the sweep: scaling, loader workers and batch size each carry
numbers with intervals, oversubscription is said next to them, and the plan table is filled.

The runs are real result rows (tests/_runs.py) spread over a full grid of devices x batch x
workers x repeats with chosen epoch times, so the expected speed-ups are known exactly."""

import math

import pandas as pd
import pytest

from analysis import grouping
from analysis.report import findings, sweep_record, render
from analysis.repeats import next_sweep
from analysis.aggregate import Aggregate
from analysis.tables.axes import batch_table, workers_table
from analysis.tables.scaling import scaling_data
from tests import _runs

# Known effects: 2 devices 1.8x faster, 1 worker 1.25x faster, batch 512 1.5x the throughput.
SPEEDUP_DEVICES, SPEEDUP_WORKERS, GAIN_BATCH = 1.8, 1.25, 1.5
NOISE = (0.98, 1.0, 1.02)  # per repeat: an interval, but a narrow one


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory):
    real = Aggregate.load(_runs.aggregate_dir(tmp_path_factory)).runs
    base = {fw: real[(real["status"] == "ok") & (real["framework"] == fw)].iloc[0] for fw in ("pyg", "dgl")}
    rows = []
    for fw, row in base.items():
        for devices in (1, 2):
            for batch in (128, 512):
                for workers in (0, 1):
                    for rep, noise in enumerate(NOISE):
                        t = (2.0 if fw == "pyg" else 1.0) * noise
                        t /= SPEEDUP_DEVICES if devices == 2 else 1.0
                        t /= SPEEDUP_WORKERS if workers else 1.0
                        thr = 1000.0 * noise * (GAIN_BATCH if batch == 512 else 1.0)
                        rows.append({**row.to_dict(), "devices": devices, "batch_size": batch, "workers": workers,
                                     "repeat": rep, "run_id": f"{fw}-d{devices}-b{batch}-w{workers}-r{rep}",
                                     "steady_epoch_time_s": t, "steady_epoch_mean_s": t, "steady_epochs": 6,
                                     "steady_epoch_cv": 0.02, "wall_time_s": 8.0 + 7 * t,
                                     "steady_seed_nodes_per_s": thr, "until": "precise", "precision": 0.03,
                                     "epochs": 20, "epochs_run": 7, "stopped_by": "precise" if rep else "epoch_cap",
                                     "stopped_by_cap": rep == 0, "precision_reached": 0.02, "drifting": False,
                                     "processes": devices * (1 + workers),
                                     "oversubscribed": devices * (1 + workers) > 2, "learned": True})
    return grouping.add_experiment(pd.DataFrame(rows))


def test_scaling_has_speedups_with_intervals(grid_runs):
    points = grouping.performance_points(grid_runs)
    scaling = scaling_data(points, grid_runs)
    multi = scaling[scaling["devices"] == 2]
    assert len(multi) == 2 * 2 * 2  # frameworks x batch sizes x workers
    assert multi["speedup"].map(lambda v: math.isclose(v, SPEEDUP_DEVICES, rel_tol=1e-6)).all()
    assert (multi["low"] < multi["speedup"]).all() and (multi["high"] > multi["speedup"]).all()
    assert set(multi["verdict"]) == {"faster"}
    assert multi.loc[multi["workers"] == 1, "oversubscribed"].all()  # 2 ranks x 2 processes on 2 cores
    assert not multi.loc[multi["workers"] == 0, "oversubscribed"].any()
    text = " ".join(findings.scaling_findings(scaling, grid_runs))
    assert "cannot be judged" not in text and "1.80×" in text and "95% CI" in text and "oversubscribed" in text


def test_workers_and_batch_axes_have_numbers(grid_runs):
    points = grouping.performance_points(grid_runs)
    workers = workers_table(points, grid_runs)
    assert len(workers.data) == 2 * 2 * 2  # frameworks x devices x batch sizes
    assert workers.data["estimate"].map(lambda v: math.isclose(v, SPEEDUP_WORKERS, rel_tol=1e-6)).all()
    assert "1.25×" in workers.html() and "‡" in workers.html()
    batch = batch_table(points, grid_runs)
    assert len(batch.data) == 2 * 2 * 2
    assert batch.data["estimate"].map(lambda v: math.isclose(v, GAIN_BATCH, rel_tol=1e-6)).all()
    assert "1.50×" in batch.html()
    finding = " ".join(findings.axis_findings(workers.data, "workers", "Loader workers", "Loader workers"))
    assert "workers 0 → 1" in finding and "faster in 4 of 4" in finding and "95% CI" in finding
    finding = " ".join(findings.axis_findings(batch.data, "batch_size", "Batch size", "Batch size"))
    assert "batch size 128 → 512" in finding and "higher in 4 of 4" in finding


def test_plan_and_precision_findings(grid_runs):
    plan = next_sweep.plan_data(grid_runs)
    assert len(plan) == 2 * 2 * 2 * 2 and plan["plan_repeats"].notna().all()
    assert (plan["plan_epochs"] >= 4).all() and (plan["plan_cost_s"] > 0).all()
    text = " ".join(findings.precision_findings(grid_runs, plan))
    assert "epochs per run 7 / 7 / 7" in text and "16 stopped at a cap" in text and "Plan for the next sweep" in text
    frame = sweep_record.runs_frame(grid_runs)
    assert (frame["stopped by"] == "CAP: epochs").sum() == 16


def test_report_page_has_every_axis(grid_runs, tmp_path):
    empty = {name: pd.DataFrame(columns=cols) for name, cols in Aggregate.FILES.items() if name != "runs"}
    agg = Aggregate(runs=grid_runs.drop(columns=["experiment"]), **empty)
    page = render.render(agg, tmp_path / "index.html", tmp_path).read_text()
    for section in ("scaling", "workers", "batch", "plan"):
        body = page.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
        assert "×" in body or section == "plan", section
        assert "No data" not in body and "Only one" not in body, section
    assert "Scaling cannot be judged" not in page
