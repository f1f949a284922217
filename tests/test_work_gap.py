"""Why one framework is slower (analysis/tables/work.py, the framework answer's "Why:"): on
constructed runs whose work and times are known, time ratio = work ratio × time per unit of work."""

import json
import re

import pandas as pd
import pytest

from analysis import grouping
from analysis.report import answers
from analysis.tables.speed import speed_data
from analysis.tables.work import samplers, work_data, work_table

# PyG takes 3x DGL's time at twice its edge updates: 1.5x DGL's time per edge update. Its forward
# and backward take 3x (1.5x per edge update), its loader waits 1.5x as long for the same edges.
EDGES = {"pyg": 2000.0, "dgl": 1000.0}
SLOWER = {"pyg": 3.0, "dgl": 1.0}
NOISE = {"pyg": (1.02, 0.98, 1.01, 0.99), "dgl": (0.99, 1.01, 0.97, 1.03)}  # launch noise per repeat


def runs_frame(work: bool = True) -> pd.DataFrame:
    rows = []
    for fw, batch, repeat in ((f, b, r) for f in ("pyg", "dgl") for b in (128, 256) for r in range(4)):
        t = SLOWER[fw] * NOISE[fw][repeat] * (2.0 if batch == 128 else 1.0)
        row = {"run_id": f"{fw}-b{batch}-r{repeat}", "status": "ok", "framework": fw, "model": "sage", "devices": 1,
               "batch_size": batch, "workers": 0, "repeat": repeat, "dataset": "synthetic", "device_type": "cpu",
               "epochs": 5, "harness": "fair", "inject": None, "steady_epoch_time_s": t,
               "step_forward_s": 0.01 * t, "step_backward_s": 0.02 * t,
               "step_load_wait_s": 0.005 * NOISE[fw][repeat] * (1.5 if fw == "pyg" else 1.0)}
        if work:
            row.update({"step_layer_edges": EDGES[fw] + repeat, "step_layer_dst_nodes": EDGES[fw] / 4,
                        "step_sampled_edges": 1000.0, "step_feature_bytes": 4096.0})
        rows.append(row)
    return grouping.add_experiment(pd.DataFrame(rows))


def test_the_time_ratio_splits_into_work_and_time_per_edge_update():
    runs = runs_frame()
    speed = speed_data(runs)
    assert len(speed) == 2
    for r in speed.to_dict("records"):
        assert r["estimate"] == pytest.approx(3.0, rel=1e-3) and r["low"] < r["estimate"] < r["high"]
        assert r["edges_work"] == pytest.approx(2001.5 / 1001.5)  # the means over the repeats
        assert r["nodes_work"] == pytest.approx(2.0) and r["sampled_work"] == pytest.approx(1.0)
        assert r["per_edge"] * r["edges_work"] == pytest.approx(r["estimate"])
        assert (r["per_edge_low"], r["per_edge_high"]) == pytest.approx((r["low"] / r["edges_work"],
                                                                         r["high"] / r["edges_work"]))
    work = work_data(speed, grouping.performance_runs(runs))
    for r in work.to_dict("records"):
        assert r["compute"] == pytest.approx(r["estimate"]) and r["compute_per_work"] == pytest.approx(r["per_edge"])
        assert r["loader"] == pytest.approx(1.5, rel=1e-3) and r["loader_per_work"] == pytest.approx(r["loader"])
        assert r["compute_low"] < r["compute"] < r["compute_high"]
    # The most a faster sampler could close: PyG's loader wait, 0.0075 s a step (mean launch noise
    # 1.0) beside forward + backward 0.03 s per unit of epoch time (3 at batch 256, 6 at 128).
    share = {r["batch_size"]: r["a_loader_share"] for r in work.to_dict("records")}
    assert share == pytest.approx({256: 0.0075 / (0.09 + 0.0075), 128: 0.0075 / (0.18 + 0.0075)})
    for r in work.to_dict("records"):
        assert r["without_loader"] == pytest.approx(r["estimate"] * (1 - r["a_loader_share"]))
    table = work_table(work, grouping.performance_runs(runs))
    assert "at most 0.3 %" in table.description  # the edge updates' spread between runs: 3 / 1000
    assert "as the adapters recorded them: not recorded" in table.description
    assert "8 %" in table.html() and "4 %" in table.html()
    assert "1.50×" in table.html()


def test_the_framework_answer_says_why_and_nothing_without_recorded_work():
    exp = runs_frame()["experiment"].iloc[0]
    text = answers.speed_answer(speed_data(runs_frame()), exp).text()
    gm = 2001.5 / 1001.5
    assert re.search(rf"Why: PyG computes {gm:.2f}× DGL's edge updates per step at {3 / gm:.2f}× its time per "
                     r"update \(95% CI \d\.\d\d–\d\.\d\d\)\. $", text), text
    older = answers.speed_answer(speed_data(runs_frame(work=False)), exp).text()
    assert "Why" not in older and older == text[:text.index("Why")]
    assert work_data(speed_data(runs_frame(work=False)), runs_frame(work=False)).empty



def test_the_caption_names_the_samplers_the_runs_recorded():
    runs = runs_frame()
    runs["adapter_choices"] = [json.dumps({"sampler": f"{fw}'s sampler"}) if fw == "pyg" else None
                               for fw in runs["framework"]]
    assert samplers(runs) == {"pyg": ["pyg's sampler"]}
    perf = grouping.performance_runs(runs)
    table = work_table(work_data(speed_data(runs), perf), perf)
    assert "as the adapters recorded them: PyG: pyg's sampler." in table.description
