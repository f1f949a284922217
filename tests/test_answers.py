"""The report's answers first (issue 25): the answer sentences (analysis/report/answers.py) on the
session's real runs (tests/_runs.py) and on their rows spread over a grid with known effects,
findings in short sentences, the human-unit formatters, tables grouped by experiment."""

import html
import itertools
import math
import re

import pandas as pd
import pytest

from analysis import PHASE_COLUMNS, PHASE_LABELS, grouping
from analysis.projection import speedup_gap
from analysis.repeats import next_sweep
from analysis import formatting
from analysis.report import answers, findings, first_screen, sweep_record
from analysis.display import frame_table
from analysis.aggregate import Aggregate
from analysis.tables.axes import batch_table, workers_table
from analysis.tables.paper import load_paper, paper_comparison
from analysis.tables.scaling import scaling_data
from analysis.tables.speed import speed_data, speed_table
from tests import _runs

MAX_WORDS = 40  # a finding longer than this runs on


@pytest.fixture(scope="module")
def agg(tmp_path_factory):
    return Aggregate.load(_runs.aggregate_dir(tmp_path_factory))


@pytest.fixture(scope="module")
def top(agg):
    return first_screen.from_aggregate(agg)


@pytest.fixture(scope="module")
def said(top):
    return {a.key: a.text() for a in top["answers"]}


@pytest.fixture(scope="module")
def page_ids(tmp_path_factory):
    return set(re.findall(r"""\bid=['"]([^'"]+)['"]""", _runs.report_page(tmp_path_factory).read_text()))


@pytest.fixture(scope="module")
def ok_runs(agg):
    runs = grouping.add_experiment(agg.runs)
    return runs[(runs["status"] == "ok")].set_index("run_name")


def steady(ok_runs, name):
    return ok_runs.loc[name, "steady_epoch_time_s"]


# -- the answers on the real runs -----------------------------------------------------------

def test_every_question_is_answered_and_every_link_lands(top, page_ids):
    keys = [a.key for a in top["answers"]]
    assert keys == ["speed", "scaling", "projection", "workers", "batch", "breakdown", "deadlocks", "accuracy"]
    assert top["experiment"] and "uneven" not in top["experiment"] and "fault" not in top["experiment"]
    for a in top["answers"]:
        assert a.text().strip() and len(a.text().split()) <= 50, a.text()
        for _, href in a.parts:
            assert href is None or href[1:] in page_ids, (a.key, href)
        print(f"[{a.label}] {a.text()}")  # the sentences, with -s
    for _, href in top["caveats"]:
        assert href[1:] in page_ids


def test_framework_answer_names_the_faster_and_its_ratio(said, ok_runs):
    ratios = sorted(steady(ok_runs, f"pyg-sage-d{d}") / steady(ok_runs, f"dgl-sage-d{d}") for d in (1, 2))
    # One repeat per framework and point: no launch noise to pool, so no interval and no verdict;
    # the answer gives the geometric mean over the configurations and their range.
    gm = math.sqrt(ratios[0] * ratios[1])
    assert said["speed"].startswith(f"GraphSAGE: not settled; PyG / DGL epoch time {gm:.2f}× (1 repeat: no interval; "
                                    f"2 configurations: {ratios[0]:.2f}×–{ratios[1]:.2f}×). Why: ")
    # the why: the edge updates each framework's runs recorded per step, and the time per update
    work = sorted(ok_runs.loc[f"pyg-sage-d{d}", "step_layer_edges"] / ok_runs.loc[f"dgl-sage-d{d}", "step_layer_edges"]
                  for d in (1, 2))
    slow, fast = ("PyG", "DGL") if gm >= 1 else ("DGL", "PyG")
    w = math.sqrt(work[0] * work[1]) if slow == "PyG" else 1 / math.sqrt(work[0] * work[1])
    per = gm / w if slow == "PyG" else 1 / (gm * w)
    ends = [f"{v:.2f}" for v in (work if slow == "PyG" else [1 / work[1], 1 / work[0]])]
    spread = f" ({ends[0]}×–{ends[1]}×)" if ends[0] != ends[1] else ""  # a range only where it shows
    assert said["speed"].endswith(f"Why: {slow} computes {w:.2f}× {fast}'s edge updates per step{spread} at "
                                  f"{per:.2f}× its time per update. ")


def test_framework_number_links_to_its_table_row(top, agg):
    runs = grouping.add_experiment(agg.runs)
    speed = speed_table(speed_data(runs), grouping.performance_runs(runs)).html()
    number, href = next(p for p in top["answers"][0].parts if p[1] and p[1].startswith("#speed-"))
    row = re.search(rf"<tr id='{re.escape(href[1:])}'>(.*?)</tr>", speed).group(1)
    assert f">{number}" in row  # the number said is the number in that row


def test_scaling_answer_quotes_the_scaling_table(said, ok_runs, top, page_ids):
    assert said["scaling"].startswith("From 1 to 2 devices (ideal 2×), PyG runs ")
    for fw in ("pyg", "dgl"):
        speedup = steady(ok_runs, f"{fw}-sage-d1") / steady(ok_runs, f"{fw}-sage-d2")
        assert f"{speedup:.2f}× (1 repeat: no interval)" in said["scaling"], fw
    # where the rest goes: from the speed-up gap split, in words either way
    assert any(s in said["scaling"] for s in (": mostly ", ": the largest part is ", "No speed-up is missing",
                                              "cannot be split"))
    scaling = next(a for a in top["answers"] if a.key == "scaling")
    assert sum(1 for _, h in scaling.parts if h == "#scaling") == 2


def test_axes_not_measured_say_so(said):
    assert said["workers"] == "Not measured: one setting only (0 loader workers per rank)."
    assert said["batch"] == "Not measured: one setting only (128 seed nodes per process)."


def test_step_answer_names_the_largest_phase(said, agg):
    points = grouping.performance_points(grouping.add_experiment(agg.runs))
    pyg = points[(points["framework"] == "pyg") & (points["n_ok"] > 0)]
    share = {ph: (pyg[f"step_{ph}_mean"] / pyg["step_s_mean"]).median() for ph in PHASE_COLUMNS}
    top_phase = max(share, key=share.get)
    lead = "mostly" if round(100 * share[top_phase]) > 50 else "the largest phase is"
    assert f"PyG: {lead} {PHASE_LABELS[top_phase]} ({100 * share[top_phase]:.0f}%)" in said["breakdown"]
    assert f"loader wait {100 * share['load_wait_s']:.0f}%" in said["breakdown"]


def test_hang_answer_calls_the_uneven_runs_demonstrations(said, agg, top):
    demos = [f for f in agg.failures if f["config"].get("uneven_batches")]
    assert demos
    text = said["deadlocks"]
    assert "with uneven batches per rank" in text and "unequal numbers of batches per rank" in text
    assert ("a deliberate demonstration of the seed study's kind of hang, not a benchmark failure" in text
            if len(demos) == 1 else
            "deliberate demonstrations of the seed study's kind of hang, not benchmark failures" in text)
    assert "1 injected fault (stall-rank) hung as intended; no other run failed." in text
    links = {h for a in top["answers"] if a.key == "deadlocks" for _, h in a.parts if h}
    assert {f"#fail-{f['run_id']}" for f in demos} <= links


def test_accuracy_answer(said):
    assert said["accuracy"].startswith("Both learn: all 4 runs beat the features-only baseline; final accuracy "
                                       "PyG − DGL ")
    assert "(1 repeat: no interval)" in said["accuracy"]


def test_caveats_name_the_missing_intervals_and_the_cpu(top):
    text = " · ".join(t for t, _ in top["caveats"])
    assert "4 of 4 points have fewer than 2 ok repeats (no interval)" in text
    assert "CPU processes, not GPUs" in text


# -- constructed failures: demonstrations, injected faults and real ones said apart ---------------

def failure(run_id, framework, status="hang", cause="uneven_batches", **config):
    return {"run_id": run_id, "status": status,
            "config": {"framework": framework, "model": "sage", "devices": 2, "workers": 0, **config},
            "diagnosis": {"cause": cause, "cause_text": f"{cause.replace('_', ' ')}: the long story"}}


def test_hang_answer_on_one_demonstration_per_framework_and_a_real_hang():
    demos = [failure("hang-pyg", "pyg", uneven_batches=True), failure("hang-dgl", "dgl", uneven_batches=True)]
    text = answers.hang_answer(demos[::-1], 10).text()  # named in the registry's order
    assert text == ("PyG and DGL GraphSAGE on 2 devices with uneven batches per rank hung (uneven batches): "
                    "deliberate demonstrations of the seed study's kind of hang, not benchmark failures. "
                    "No other run failed.")
    real = failure("real", "pyg", cause="stalled_worker", workers=2)
    text = answers.hang_answer([*demos, real], 10).text()
    assert text.endswith("1 run hung for real: stalled worker; e.g. PyG GraphSAGE on 2 devices, 2 workers. ")
    assert answers.hang_answer([], 3).text() == "All 3 runs ended ok or skipped: nothing to diagnose."


# -- "mostly" only above half (issue 57, item 6) ---------------------------------------------

def gap_rows(**tops) -> pd.DataFrame:
    """gap_data rows, one split 2-device point per framework: framework=(part, share), the share
    of that part; the gap's other parts share the rest alike (each below it)."""
    rows = []
    for fw, (part, share) in tops.items():
        rest = (1 - share) / (len(speedup_gap.PARTS) - 1)
        rows.append({"experiment": "e", "framework": fw, "model": "sage", "batch_size": 256, "series_workers": "0",
                     "devices": 2, "reason": None, "gap_s": 0.4,
                     **{f"{p}_share": share if p == part else rest for p in speedup_gap.PARTS}})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("tops, text", [
    # the sentence that read "PyG and DGL: mostly all-reduce + waiting (PyG 30%, DGL 51% of the gap)"
    ({"pyg": ("allreduce_wait", 0.30), "dgl": ("allreduce_wait", 0.51)},
     "PyG and DGL: the largest part is all-reduce + waiting (PyG 30%, DGL 51% of the gap). "),
    ({"pyg": ("allreduce_wait", 0.62), "dgl": ("allreduce_wait", 0.55)},
     "PyG and DGL: mostly all-reduce + waiting (PyG 62%, DGL 55% of the gap). "),
    ({"pyg": ("compute", 0.40), "dgl": ("allreduce_wait", 0.70)},
     "PyG: the largest part is compute contention (40% of the gap). "
     "DGL: mostly all-reduce + waiting (70% of the gap). "),
    # 50.4% prints as 50%: not above half as the reader sees it
    ({"pyg": ("compute", 0.504)}, "PyG: the largest part is compute contention (50% of the gap). "),
])
def test_the_gap_is_mostly_one_part_only_where_it_is_above_half(tops, text):
    parts = answers._gap_parts(gap_rows(**tops), list(tops))
    assert "".join(t for t, _ in parts) == text


def step_points(**tops) -> pd.DataFrame:
    """Grid points, one per framework: framework=(phase, share of a 100 ms step); the other phases
    share the rest alike, the loader's wait included."""
    rows = []
    for fw, (phase, share) in tops.items():
        rest = (1 - share) / (len(PHASE_COLUMNS) - 1)
        rows.append({"experiment": "e", "framework": fw, "n_ok": 3, "step_s_mean": 0.1,
                     **{f"step_{ph}_mean": 0.1 * (share if ph == phase else rest) for ph in PHASE_COLUMNS}})
    return pd.DataFrame(rows)


def test_a_step_is_mostly_one_phase_only_where_it_is_above_half():
    said = answers.step_answer(step_points(pyg=("backward_s", 0.42), dgl=("forward_s", 0.55)), "e").text()
    assert said == (f"PyG: the largest phase is {PHASE_LABELS['backward_s']} (42%), loader wait 12%; "
                    f"DGL: mostly {PHASE_LABELS['forward_s']} (55%), loader wait 9% (median shares of a step).")
    assert "mostly" not in said.split(";")[0]


# -- a grid with known effects: intervals, verdicts and every axis --------------------------

@pytest.fixture(scope="module")
def grid_top(agg):
    return _grid_answers(agg, repeats=3)


def _grid_answers(agg, repeats: int, worker_gain: float = 1.25, **override) -> dict:
    """The real ok rows as `repeats` repeats of PyG/DGL x 1/2 devices x batch 128/512 x 0/1 workers:
    PyG 2x DGL's epoch time, 2 devices 1.8x faster, a worker 1.25x faster, batch 512 1.5x the
    throughput. Each point meets the same three noise factors in its own order (a factor shared
    by a repeat's runs would be a drift the block fit takes out). `override`: columns set on every run."""
    base = {fw: agg.runs[(agg.runs["status"] == "ok") & (agg.runs["framework"] == fw)].iloc[0] for fw in ("pyg", "dgl")}
    rows = []
    for k, (fw, d, b, w) in enumerate(itertools.product(base, (1, 2), (128, 512), (0, 1))):
        for rep in range(repeats):
            noise = (0.98, 1.0, 1.02)[(rep + k) % 3]
            t = (2.0 if fw == "pyg" else 1.0) * noise / (1.8 if d == 2 else 1) / (worker_gain if w else 1)
            rows.append({**base[fw].to_dict(), "devices": d, "batch_size": b, "workers": w, "repeat": rep,
                         "run_id": f"{fw}-d{d}-b{b}-w{w}-r{rep}", "steady_epoch_time_s": t,
                         "steady_seed_nodes_per_s": 1000 * noise * (1.5 if b == 512 else 1),
                         "oversubscribed": d * (1 + w) > 2, "cpu_busy_before": 0.0, **override})
    runs = pd.DataFrame(rows)
    empty = {k: pd.DataFrame(columns=c) for k, c in Aggregate.FILES.items() if k != "runs"}
    grid = Aggregate(runs=runs, **empty)
    grid.failures = []
    return {a.key: a.text() for a in first_screen.from_aggregate(grid)["answers"]}


def test_grid_answers_carry_intervals_and_verdicts(grid_top):
    assert re.fullmatch(r"GraphSAGE: DGL is faster; PyG takes 2\.00× as long \(95% CI 1\.9\d–2\.0\d; 8 "
                        r"configurations: 2\.00×–2\.00×\); clear in 8 of 8 configurations\. "
                        # every grid run copies its framework's real work per step: the same ratio everywhere
                        r"Why: PyG computes (\d\.\d\d)× DGL's edge updates per step at (\d\.\d\d)× its time per update "
                        r"\(95% CI \d\.\d\d–\d\.\d\d\)\. ", grid_top["speed"])
    assert grid_top["scaling"].startswith("From 1 to 2 devices (ideal 2×), PyG runs 1.80× faster (95% CI 1.")
    assert grid_top["workers"].startswith("Yes: workers 0 → 1, epoch speed-up PyG faster 1.25× (95% CI ")
    assert "clearly faster in 8 of 8" in grid_top["workers"]
    assert grid_top["batch"].startswith("Larger batches raise throughput: batch size 128 → 512, throughput gain "
                                        "PyG higher 1.50× (95% CI ")
    assert grid_top["deadlocks"] == "All 48 runs ended ok or skipped: nothing to diagnose."


def test_a_narrow_interval_around_1x_is_no_clear_effect_not_unsettled(agg):
    """"Not settled" is the first screen's word for an interval wider than the precision; workers
    that change nothing, measured to ±2 %, are "no clear effect", with what the interval allows."""
    said = _grid_answers(agg, repeats=3, worker_gain=1.0)
    assert said["workers"].startswith("Not clearly: workers 0 → 1, epoch speed-up PyG no clear effect 1.00× (95% CI 0.9")
    assert "which allows either" in said["workers"] and "not settled" not in said["workers"]


def test_one_repeat_settles_nothing_and_gpu_runs_say_how_to_time_phases(agg):
    # As the first GPU sweep (H200, 1 repeat, CUDA without --breakdown on) read: "No clear effect:
    # ... 3.58× (1 repeat: no interval)" and "no ok run recorded its phases", with no why.
    phases = {c: None for c in ("step_load_wait_s", "step_prepare_s", "step_copy_s", "step_forward_s",
                                "step_backward_s", "step_optimizer_s", "step_s")}
    said = _grid_answers(agg, repeats=1, device_type="cuda", **phases)
    assert re.match(r"Not settled: batch size 128 → 512, throughput gain PyG 1\.\d\d× \(1 repeat: no interval", said["batch"])
    assert said["breakdown"].startswith("Not measured: no ok run recorded its phases. A GPU run times its phases "
                                        "only with --breakdown on")
    cpu = _grid_answers(agg, repeats=1, device_type="cpu", **phases)
    assert cpu["breakdown"] == "Not measured: no ok run recorded its phases."


def loader_runs(agg, graphbolt_over_classic: float) -> pd.DataFrame:
    """The real ok rows as 3 repeats of PyG, DGL classic and DGL GraphBolt x 1/2 devices: PyG 2x
    DGL classic's epoch time, GraphBolt `graphbolt_over_classic` x classic's."""
    base = {fw: agg.runs[(agg.runs["status"] == "ok") & (agg.runs["framework"] == fw)].iloc[0] for fw in ("pyg", "dgl")}
    rows = []
    for k, (fw, loader) in enumerate((("pyg", "neighbor"), ("dgl", "classic"), ("dgl", "graphbolt"))):
        for d in (1, 2):
            for rep in range(3):
                noise = (0.98, 1.0, 1.02)[(rep + k + d) % 3]  # its own order per point: noise, not a drift
                t = {"pyg": 2.0, "classic": 1.0, "graphbolt": graphbolt_over_classic}[fw if fw == "pyg" else loader]
                t = t * noise / (1.8 if d == 2 else 1)
                rows.append({**base[fw].to_dict(), "devices": d, "batch_size": 1024, "workers": 0, "repeat": rep,
                             "loader": loader, "loader_variant": "graphbolt" if loader == "graphbolt" else "default",
                             "run_id": f"{loader}-{fw}-d{d}-r{rep}", "steady_epoch_time_s": t, "steady_epoch_mean_s": t,
                             "cpu_busy_before": 0.0})
    return pd.DataFrame(rows)


def test_loader_answer_says_classic_or_graphbolt_and_whether_the_verdict_holds(agg):
    from analysis.variants import loaders

    slower = loaders.loader_answer_parts(loaders.loader_rows(loader_runs(agg, 1.2)))
    text = "".join(t for t, _ in slower)
    assert re.fullmatch(r"GraphSAGE: DGL's epoch time with graphbolt is 1\.20× \(95% CI 1\.1\d–1\.2\d\) its classic "
                        r"loader's \(geometric mean of 2 configurations: 1\.20×–1\.20×\); slower in 2, faster in 0 of 2\. "
                        r"Against PyG, the verdict holds: DGL faster with either loader \(DGL / PyG epoch time "
                        r"0\.50× \(0\.4\d–0\.5\d\) with classic, 0\.60× \(0\.5\d–0\.6\d\) with graphbolt\)\. ", text), text
    assert any(t.startswith("1.20× (95% CI") and h == "#loaders" for t, h in slower), slower  # linked to its table
    flipped = "".join(t for t, _ in loaders.loader_answer_parts(loaders.loader_rows(loader_runs(agg, 2.5))))
    assert "the verdict changes: DGL faster with classic, PyG with graphbolt" in flipped, flipped
    # Without another loader the question is not asked at the top (the tests' grid has none).
    assert loaders.loader_rows(agg.runs).empty
    assert "Not measured" in loaders.loader_answer_parts(loaders.loader_rows(agg.runs))[0][0]


# -- findings in short sentences -------------------------------------------------------------

def finding_items(page_text: str) -> list:
    section = page_text.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    for extra in ("study", "plan", "lanes"):
        section += page_text.split(f'<section id="{extra}">', 1)[1].split("</section>", 1)[0]
    return [html.unescape(re.sub(r"<[^>]+>", "", li)) for li in re.findall(r"<li>(.*?)</li>", section, re.S)]


@pytest.mark.e2e  # renders the report of real runs
def test_no_finding_runs_on(tmp_path_factory):
    items = finding_items(_runs.report_page(tmp_path_factory).read_text())
    assert len(items) > 15
    long = [t for t in items if len(t.split()) > MAX_WORDS]
    assert not long, long


def test_findings_on_the_grid_stay_short(agg):
    runs = grouping.add_experiment(_grid_runs(agg))
    points = grouping.performance_points(runs)
    scaling = scaling_data(points, runs)
    groups = findings.all_findings(runs, points, scaling, paper_comparison(points, load_paper()).data, agg.invalid,
                                   workers=workers_table(points, runs).data, batch=batch_table(points, runs).data,
                                   plan=next_sweep.plan_data(runs))
    items = [t for g in groups for t in g["items"]]
    assert any("95% CI" in t for t in items) and any("workers 0 → 1" in t for t in items)
    assert not [t for t in items if len(t.split()) > MAX_WORDS]


def _grid_runs(agg):
    rows = []
    for _, row in agg.runs[agg.runs["status"] == "ok"].iterrows():
        for rep, noise in enumerate((0.97, 1.0, 1.03)):
            for w in (0, 1):
                rows.append({**row.to_dict(), "repeat": rep, "workers": w, "run_id": f"{row['run_id']}-{w}-{rep}",
                             "steady_epoch_time_s": row["steady_epoch_time_s"] * noise / (1.2 if w else 1)})
    return pd.DataFrame(rows)


# -- human units and tables grouped by experiment -------------------------------------------

@pytest.mark.parametrize("value, text", [(784_737_244, "748 MiB"), (512, "512 B"), (1536, "1.50 KiB"),
                                         (24 * 2**30, "24.0 GiB"), (3 * 2**40, "3.00 TiB"), (None, "n/a")])
def test_fmt_bytes(value, text):
    assert formatting.fmt_bytes(value) == text


@pytest.mark.parametrize("value, text", [(0.0412, "41.2 ms"), (1.5, "1.50 s"), (95, "95.0 s"), (250, "4.2 min"),
                                         (9000, "2.5 h"), (-0.035, "-35.0 ms"), (float("nan"), "n/a")])
def test_fmt_duration(value, text):
    assert formatting.fmt_duration(value) == text


@pytest.mark.parametrize("mean, half, text", [(0.412, 0.0123, "412 ± 12 ms"), (1.234, 0.04, "1.23 ± 0.04 s"),
                                               (2.5, float("nan"), "2.50 s"), (300, 12, "5.0 ± 0.2 min")])
def test_fmt_duration_with_interval_keeps_one_unit(mean, half, text):
    assert formatting.fmt_duration_pm(mean, half) == text


def test_plain_tables_print_seconds_and_bytes_in_human_units():
    frame = pd.DataFrame([{"run": "a", "train_time_s": 0.0412, "wall_s": 250.0, "rss_bytes": 784_737_244,
                           "steps": 12_345, "ratio": 1.23456}])
    cells = [c.text for c in frame_table(frame, "x", "x", "x").grids[0].rows[0]]
    assert cells == ["a", "41.2 ms", "4.2 min", "748 MiB", "12.3k", "1.23"]


@pytest.mark.parametrize("value, text", [(9876, "9,876"), (12_345, "12.3k"), (784_737_244, "785M"), (None, "n/a")])
def test_fmt_count(value, text):
    assert formatting.fmt_count(value) == text


def test_memory_table_in_mib_and_gib():
    memory = pd.DataFrame([{"framework": "pyg", "model": "sage", "devices": 2, "workers": 1, "batch_size": 512,
                            "mem_limit_bytes": 2 * 2**30, "runs": 1, "statuses": "ok", "mem_model_bytes": 784_737_244,
                            "mem_peak_bytes": 1.5 * 2**30, "mem_cgroup_peak_bytes": None, "peak_over_model": 2.05,
                            "model_over_limit": 0.365, "oom_killed": None}])
    row = sweep_record.memory_frame(memory).iloc[0]
    assert row["modelled peak"] == "748 MiB" and row["measured peak"] == "1.50 GiB" and row["limit"] == "2.00 GiB"
    assert row["model"] == "sage" and row["measured / modelled"] == "2.05×"


def test_plan_and_runs_tables_say_the_experiment_once(agg):
    runs = grouping.add_experiment(_grid_runs(agg).assign(until="precise", steady_epoch_mean_s=1.0,
                                                          steady_epochs=5, steady_epoch_cv=0.02, wall_time_s=9.0))
    frame = sweep_record.plan_frame(next_sweep.plan_data(runs))
    table = frame_table(frame, "plan", "Plan", "", group_col="experiment")
    label = runs["experiment"].iloc[0]
    assert len(frame) > 1 and table.html().count(html.escape(label)) == 1  # its grid's caption, not every row
    assert frame["epoch"].str.endswith((" ms", " s")).all()


def test_an_answer_wider_than_the_precision_is_named_with_what_would_settle_it():
    """An interval of ±15 % at 2 repeats a point, aimed at ±10 %: (ln 1.15 / ln 1.1)^2 = 2.14 times
    the runs, so 3 more a point (ceil(2 x 1.14)), over its 8 points 24 runs; ±5 % is left alone."""
    wide = answers.Answer("speed", intervals=[{"what": "GAT PyG / DGL", "estimate": 2.0, "low": 2 / 1.15,
                                                    "high": 2 * 1.15, "points": 8}])
    narrow = answers.Answer("scaling", intervals=[{"what": "PyG 1 → 2", "estimate": 1.5, "low": 1.5 / 1.05,
                                                        "high": 1.5 * 1.05, "points": 12}])
    rows = first_screen.open_answers([wide, narrow], 0.10, 2, 6.0)
    assert [r["what"] for r in rows] == ["GAT PyG / DGL"]
    assert rows[0]["half"] == pytest.approx(0.15) and rows[0]["runs"] == 24 and rows[0]["minutes"] == pytest.approx(2.4)
    (text, href), = first_screen._open_caveat(rows, 0.10)
    assert text == "not settled to ±10 %: GAT PyG / DGL (±15 %); about 24 more runs (2 min) would settle it"
    assert href == "#plan"
    assert first_screen.open_answers([narrow], 0.10, 2, 6.0) == [] and first_screen._open_caveat([], 0.10) == []


def test_the_cost_of_an_open_answer_is_the_planners_from_the_runs():
    """Where the runs are there, the first screen quotes the second round's planner (whole repeat
    blocks, analysis.repeats.second_round.settling_cost), not the per-answer scaling of open_answers; where the
    planner cannot say (an answer it does not plan for), the scaling stays."""
    import numpy as np

    noise = iter(np.exp(np.random.default_rng(3).normal(0, 0.06, size=24)))
    runs = pd.DataFrame([{"experiment": "e", "dataset": "small", "device_type": "cpu", "lane": "pair",
                          "framework": fw, "model": "gat", "devices": d, "batch_size": b, "workers": 0,
                          "loader_variant": "default", "repeat": r, "status": "ok", "until": "precise",
                          "steady_epoch_time_s": base / d * next(noise), "wall_time_s": 8.0}
                         for fw, base in (("pyg", 2.0), ("dgl", 1.0)) for d in (1, 2) for b in (256, 1024)
                         for r in range(3)])
    wide = answers.Answer("speed", intervals=[{"what": "GAT PyG / DGL", "estimate": 2.0, "low": 2 / 1.15,
                                                    "high": 2 * 1.15, "points": 8, "answer": ("framework:pyg", "gat")}])
    rows = first_screen.open_answers([wide], 0.05, 3, 9.0)
    planned = first_screen.planned_cost(rows, runs, "e", 0.05)
    assert planned["settled"] and planned["runs"] % 8 == 0 and planned["runs"] != rows[0]["runs"]
    (text, _), = first_screen._open_caveat(rows, 0.05, planned)
    assert text == (f"not settled to ±5 %: GAT PyG / DGL (±15 %); about {planned['runs']} more runs "
                    f"({planned['minutes']:.0f} min) would settle it")
    rows[0]["answer"] = None  # e.g. 1 → 4 devices, which the planner does not plan for
    assert first_screen.planned_cost(rows, runs, "e", 0.05) is None


def test_the_planners_widths_are_the_first_screens(agg):
    """The second round's planner and the first screen measure an answer alike (the same run time,
    noise pool and block fit): on one grid, every answer the planner plans for has the half-width
    the page states, so "settled" means the same to both."""
    import numpy as np

    from analysis.repeats import plan_points, second_round

    rng = np.random.default_rng(6)
    base = {fw: agg.runs[(agg.runs["status"] == "ok") & (agg.runs["framework"] == fw)].iloc[0] for fw in ("pyg", "dgl")}
    rows = []
    for fw, d, b, w in itertools.product(base, (1, 2), (256, 1024), (0, 1)):
        for rep in range(3):
            t = (2.0 if fw == "pyg" else 1.0) / d / (1.2 if w else 1) * math.exp(rng.normal(0, 0.1))
            rows.append({**base[fw].to_dict(), "devices": d, "batch_size": b, "workers": w, "repeat": rep,
                         "run_id": f"{fw}-d{d}-b{b}-w{w}-r{rep}", "until": "precise", "steady_epoch_time_s": t,
                         "steady_seed_nodes_per_s": b * d / t, "wall_time_s": 9.0, "oversubscribed": d * (1 + w) > 2,
                         "cpu_busy_before": 0.0})
    runs = pd.DataFrame(rows)
    empty = {k: pd.DataFrame(columns=c) for k, c in Aggregate.FILES.items() if k != "runs"}
    grid = Aggregate(runs=runs, **empty)
    grid.failures = []
    top = first_screen.from_aggregate(grid)
    page = {i["answer"]: math.sqrt(i["high"] / i["low"]) - 1 for a in top["answers"] for i in a.intervals
            if i.get("answer")}
    _, _, planned, measured = second_round._answers(plan_points.points_from_runs(runs), 0.1, 0, 5)
    keys = {cs[0].answer_key(): name for name, cs in planned.items()}
    assert {("framework:pyg", "sage"), ("devices", "pyg"), ("workers", "dgl")} <= set(keys) & set(page)
    for key in set(keys) & set(page):
        assert measured[keys[key]] == pytest.approx(page[key], rel=1e-6), key
