"""The projection on the report (issue 41, items 4-5): the first-screen sentence from constructed
worlds whose answer is known (tests/test_project.py's), the "Not measured", unchecked and failed
wordings, and the section rendered from an Aggregate built in memory: folded figure and tables,
what it says about the host and the all-reduce, and the new assets in REPORT_TABLES/REPORT_PLOTS."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis import REPORT_PLOTS, REPORT_TABLES, aggregate, caption_name, declared
from analysis.projection import predict, text
from analysis.report import answers, render
from analysis.aggregate import Aggregate
from tests.test_project import COLL, PHASES, expected, world

SCHEMA_1 = Path(__file__).resolve().parent / "data" / "schema1" / "result.json"


def res_of(frames, **kw):
    return predict.project(*frames, devices=list(text.REPORT_DEVICES), draws=kw.pop("draws", 20), **kw)


def said(res, measured=(1, 2)) -> str:
    exp = res["projection"]["experiment"].iloc[0] if len(res["projection"]) else "e"
    return "".join(t for t, _ in text.answer_parts(res, exp, list(measured)))


def test_the_sentence_quotes_the_median_configuration_the_host_and_the_check():
    res = res_of(world(cores=2), collectives=COLL)
    s = {fw: expected(fw, 1) / expected(fw, 4) for fw in PHASES}
    # a noiseless world: the intervals close on the point, the check is exact
    # two held-out points cannot calibrate a 90 % interval (9 can): the sentence says its intervals are the inputs' only
    assert said(res) == (f"Uncalibrated (2 held-out points; 9 calibrate a 90 % interval): "
                         f"4 devices: PyG {s['pyg']:.1f}× (95% {s['pyg']:.1f}–{s['pyg']:.1f}), DGL {s['dgl']:.1f}× "
                         f"({s['dgl']:.1f}–{s['dgl']:.1f}) over 1 (median configuration); a 2-core host is "
                         "oversubscribed from 3 ranks; checked on the measured 2-device points: 2 of 2 inside their "
                         "intervals, median error 0 %.")
    parts = text.answer_parts(res, res["projection"]["experiment"].iloc[0], [1, 2])
    links = [h for _, h in parts if h]
    assert text.VALIDATION_ANCHOR in links and sum(h.startswith("#projection-") for h in links) == 2
    assert len(said(res).split()) <= 50


def test_the_speedup_interval_pairs_the_draws_and_widens_with_noise():
    runs, epochs, steps = world(cores=2)
    # launch noise: the repeats differ by 4 %, so the intervals open around the point
    runs.loc[runs["repeat"] == 1, "steady_epoch_mean_s"] *= 1.04
    res = res_of((runs, epochs, steps), collectives=COLL)
    p = res["projection"]
    one = p[p["devices"] == 1]
    assert (one["speedup_low"] == 1).all() and (one["speedup_high"] == 1).all()
    four = p[p["devices"] == 4]
    assert (four["speedup_low"] < four["speedup"]).all() and (four["speedup"] < four["speedup_high"]).all()


def test_a_failed_check_is_said_first_and_plainly():
    # PyG slows 10 % per added rank, DGL 60 %: each predicted from the other's contention misses
    pyg = world(phases={"pyg": PHASES["pyg"]}, r=1.1, cores=2)
    dgl = world(phases={"dgl": PHASES["dgl"]}, r=1.6, cores=2)
    res = res_of([pd.concat([a, b], ignore_index=True) for a, b in zip(pyg, dgl)], collectives=COLL)
    sentence = said(res)
    # no number past the measured device counts, and which configurations the model gets most wrong
    assert re.fullmatch(r"Not reliable: 0 of 2 measured 2-device points inside their intervals, median error \d+ % "
                        r"\(largest misses: (PyG|DGL) GraphSAGE.* N=2 [+-]\d+ %, (PyG|DGL) GraphSAGE.* N=2 [+-]\d+ %\); "
                        r"no projection past 2 devices\.", sentence), sentence
    assert "4 devices" not in sentence and "checked on" not in sentence and len(sentence.split()) <= 50
    # where each miss sits: the parts add up to the whole error; PyG's (predicted from DGL's 60 %
    # contention) overshoots in every part, DGL's undershoots
    for r in res["validation"].to_dict("records"):
        parts = [r["miss_loader_s"], r["miss_steps_s"], r["miss_outside_s"]]
        assert sum(parts) == pytest.approx(r["predicted_s"] - r["measured_s"])
        assert all(x > 0 for x in parts) if r["framework"] == "pyg" else all(x < 0 for x in parts)
    shown = text.validation_frame(res["validation"])["error by part"]
    assert all(re.fullmatch(r"(rest of the steps|loader|outside) [+-]\d+ ms(, (rest of the steps|loader|outside) "
                            r"[+-]\d+ ms){2}", t) for t in shown), list(shown)


def test_the_conformal_quantile_needs_enough_points():
    # ceil((n + 1) 0.9)-th smallest: with 9 scores the largest, with 19 the 18th; with 8, none
    assert predict.conformal_quantile(range(1, 10)) == 9
    assert predict.conformal_quantile(range(1, 20)) == 18
    assert predict.conformal_quantile(range(1, 9)) == float("inf")


def calibration_frames(errors, devices=(1, 2, 4, 8)):
    """validation rows with the given relative errors (one configuration each) and projection rows of
    the first configuration whose bootstrap intervals are +-1 %."""
    cfg = [{"experiment": "e", "framework": "pyg", "model": "sage", "batch_size": 64 * (i + 1), "workers": 0}
           for i in range(len(errors))]
    val = pd.DataFrame([{**c, "devices": 2, "measured_s": 1.0, "predicted_s": 1.0 + e, "low_s": (1.0 + e) * 0.99,
                         "high_s": (1.0 + e) * 1.01, "error": e, "inside": abs(e) < 0.01, "reason": None}
                        for c, e in zip(cfg, errors)])
    proj = pd.DataFrame([{**cfg[0], "devices": n, "predicted_s": 1.0 / n, "low_s": 0.99 / n, "high_s": 1.01 / n,
                          "speedup": float(n), "speedup_low": 0.99 * n, "speedup_high": 1.01 * n} for n in devices])
    return proj, val


def test_intervals_are_calibrated_on_the_other_configurations_held_out_errors():
    errors = [0.02, -0.04, 0.06, -0.08, 0.10, -0.12, 0.14, -0.16, 0.18, -0.30]
    out = predict.calibrate(*calibration_frames(errors))
    v, p, cal = out["validation"], out["projection"], out["calibration"]
    scores = [abs(math.log(1 + e)) for e in errors]
    assert cal["calibrated"] and cal["n"] == 10 and cal["q"] == pytest.approx(sorted(scores)[9])  # ceil(11 x 0.9)
    # each point's interval from the other 9 scores: their largest; the -30 % point's others reach 18 % only
    for i, e in enumerate(errors):
        q = max(sc for j, sc in enumerate(scores) if j != i)
        assert v.loc[i, "high_s"] == pytest.approx(max((1 + e) * 1.01, (1 + e) * math.exp(q)))
    assert list(v["inside"]) == [True] * 9 + [False] and not v["inside_noise"].any()
    # a projection at N devices widens by the held-out quantile times N - 1; 1 device stays exact
    for r in p.to_dict("records"):
        grow = cal["q"] * (r["devices"] - 1)
        assert r["speedup_low"] == pytest.approx(min(0.99, math.exp(-grow)) * r["devices"])
        assert r["high_s"] == pytest.approx(max(1.01, math.exp(grow)) / r["devices"])
    said = text.interval_text(cal)
    assert "split-conformal 90% quantile of the 10 held-out points" in said and "times N - 1" in said


def test_too_few_held_out_points_leave_the_intervals_as_they_are():
    proj, val = calibration_frames([0.05, -0.2, 0.1])
    out = predict.calibrate(proj, val)
    assert not out["calibration"]["calibrated"] and out["calibration"]["needed"] == 9
    pd.testing.assert_frame_equal(out["projection"], proj)
    assert list(out["validation"]["inside"]) == list(val["inside"])


def test_a_large_median_error_fails_the_check_even_with_every_point_inside():
    v = pd.DataFrame([{"experiment": "e", "framework": "pyg", "model": "sage", "batch_size": 1, "workers": 0,
                       "devices": 2, "error": e, "inside": True, "reason": None} for e in (0.2, -0.3, 0.25)])
    c = text.check(v)
    assert c["inside"] == 3 and c["fails"] and c["median_error"] == pytest.approx(0.25)
    assert "FAILS this check: a median error above 15%" in text.verdict(v)
    assert not text.check(v.assign(error=0.05))["fails"]


def test_nothing_projected_says_not_measured():
    res = res_of(world(devices=(1,)), collectives=COLL)
    assert said(res, [1]) == ("Not measured: ok timing runs at 1 device only; a projection needs runs at 1 and 2 "
                              "devices.")
    res = res_of(world(devices=(2,)), collectives=COLL)
    assert said(res, [2]).startswith("Not measured: ok timing runs at 2 devices only")
    assert text.answer_parts(None, None, []) == [
        ("Not measured: no ok timing run to project from.", "#projection")]


def test_one_configuration_is_projected_but_unchecked():
    res = res_of(world(phases={"pyg": PHASES["pyg"]}, cores=2), collectives=COLL)
    assert said(res).startswith("Unchecked (no other configuration measured 1 -> 2): 4 devices: PyG ")


def test_the_answer_is_the_projections_and_states_no_open_interval():
    runs, epochs, steps = world(cores=2)
    res = res_of((runs, epochs, steps), collectives=COLL)
    from analysis.grouping import add_experiment
    runs = add_experiment(runs)
    ans = answers.projection_answer(res, runs, runs["experiment"].iloc[0])
    assert ans.key == "projection" and ans.label == "What would more devices give?" and ans.measured
    assert ans.text() == said(res)
    assert ans.intervals == []  # the model's intervals: more repeats of the same points would not settle them


# -- the page ---------------------------------------------------------------------------------

def in_memory(tmp_path, frames) -> Aggregate:
    """An Aggregate of the world's runs, epochs and steps, each run row completed from the saved
    schema-1 result's (so the rest of the report has every column it reads)."""
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(SCHEMA_1.read_text())
    base = aggregate.aggregate([tmp_path / "r"]).runs.iloc[0].to_dict()
    runs, epochs, steps = frames
    keep = [c for c in runs.columns if c not in ("until", "epochs", "dataset", "command")]
    rows = [{**base, **r, "run_name": r["run_id"], "steady_epoch_time_s": r["steady_epoch_mean_s"]}
            for r in runs[keep].to_dict("records")]
    empty = {k: pd.DataFrame(columns=c) for k, c in Aggregate.FILES.items() if k not in ("runs", "epochs", "steps")}
    return Aggregate(runs=pd.DataFrame(rows), epochs=epochs, steps=steps, **empty)


def section(page: str, sid: str) -> str:
    return re.search(rf'<section id="{sid}">(.*?)</section>', page, re.S).group(1)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("projection")
    agg = in_memory(tmp, world(cores=2))
    page = render.render(agg, tmp / "report" / "index.html", tmp / "report").read_text()
    return tmp / "report", page


def test_the_section_follows_scaling_and_keeps_its_detail_folded(rendered):
    assets, page = rendered
    order = [page.index(f'<section id="{s}">') for s in ("scaling", "projection", "speedup-gap")]
    assert order == sorted(order)
    first = section(page, "answers")
    assert first.index("How far does each framework scale?") < first.index("What would more devices give?")
    sec = section(page, "projection")
    assert "<h2>What would more devices give?</h2>" in sec and "4 devices: PyG " in sec
    # with every fold closed the heading and the fold's summary show: the answer and what it rests on
    summary = re.search(r'<summary class="answer">(.*?)</summary>', sec, re.S).group(1)
    assert "4 devices: PyG " in summary and "a 2-core host is oversubscribed from 3 ranks" in summary
    assert "Projected: nothing beyond 2 devices ran on" in summary
    assert "all-reduce from the 2-device runs (no micro-benchmark beside the aggregate)" in summary
    assert "<img" not in summary and "<table" not in summary
    folded = sec[sec.index("</summary>"):]
    assert "<img" in folded and 'id="table-projection"' in folded and 'id="table-projection_validation"' in folded
    assert "What the projection assumes" in folded and "ranks draw their step times independently" in folded
    # every link of the sentence lands on the page
    ids = set(re.findall(r"""\bid=['"]([^'"]+)['"]""", page))
    links = re.findall(r"href='#([^']+)'", summary)
    assert links and set(links) <= ids


def test_the_new_tables_and_plot_are_registered_and_written(rendered):
    assets, _ = rendered
    assert {"projection", "projection_validation"} <= set(REPORT_TABLES) and "projection" in REPORT_PLOTS
    assert {"projection.csv", "projection.html", "projection_validation.csv", "projection.png"} <= set(render.ASSETS)
    assert all((assets / name).is_file() for name in render.ASSETS)
    captions = Path(__file__).resolve().parents[1] / "workflows" / "report"
    caption = captions / f"{caption_name('projection', REPORT_PLOTS['projection'])}.rst"
    assert caption.is_file() and all((caption.parent / f"{t}.rst").is_file() for t in declared(REPORT_TABLES))
    csv = pd.read_csv(assets / "projection.csv")
    assert set(csv["devices"]) == {1, 2, 4, 8} and {"speedup_low", "speedup_high"} <= set(csv.columns)
    assert len(pd.read_csv(assets / "projection_validation.csv")) == 2


def test_a_micro_benchmark_is_named_on_the_page(tmp_path):
    agg = in_memory(tmp_path, world(cores=2))
    bench = tmp_path / "collectives.json"
    bench.write_text(json.dumps({"backend": "gloo", "fit": {"alpha_s": COLL["alpha_s"], "beta_s_per_byte":
                                                            COLL["beta_s_per_byte"], "points": [{"relative_error": 0}]}}))
    page = render.render(agg, tmp_path / "out" / "index.html", tmp_path / "out", collectives=bench).read_text()
    assert f"all-reduce from the micro-benchmark {bench}" in section(page, "projection")


def test_one_device_count_gives_not_measured_and_no_folds(tmp_path):
    agg = in_memory(tmp_path, world(devices=(1,)))
    page = render.render(agg, tmp_path / "out" / "index.html", tmp_path / "out").read_text()
    sec = section(page, "projection")
    assert "Not measured: ok timing runs at 1 device only" in sec and "<details" not in sec and "<p class=\"answer\">" in sec
    assert "Not measured: ok timing runs at 1 device only" in section(page, "answers")
