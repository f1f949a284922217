"""The adaptive second round (analysis/repeats/second_round.py) on constructed first rounds: its intervals
are the report's, it adds repeats only where an interval is too wide, never because of where
an interval lies, and it keeps to its budget and cap."""

import json
import math
import os
import time

import pytest

from analysis import stats
from analysis.repeats import plan_file, plan_points, second_round
from runners.records.result import SCHEMA_VERSION


def point(fw, times, wall=10.0, model="sage", devices=2, batch=256, workers=0):
    key = (fw, model, devices, batch, workers, "default")
    name = f"{fw}-{model}-d{devices}-b{batch}-w{workers}"
    return key, plan_points.Point(key, list(times), [wall] * len(times), {"dataset": "small", "name": name})


def points(*items):
    return dict(items)


def half_width(sd, dof, pairs):
    """The half-width of an answer whose comparisons have repeats (n_a, n_b) each, all at one
    spread: their log variances, combined as the planner does (second_round.combined_half_width)."""
    return second_round.combined_half_width([(sd * sd * (1 / a + 1 / b), dof) for a, b in pairs])


def test_half_width_is_the_reports_interval():
    """The planner's half-width at the pooled spread is the report's pooled interval."""
    a, b = [1.00, 1.06, 0.97], [0.50, 0.52]
    ratio, low, high = stats.ratio_interval(a, b, (0.05, 12, 0.05, 12))
    hw = half_width(0.05, 12, [(len(a), len(b))])
    assert hw == pytest.approx(high / ratio - 1, rel=1e-9)
    assert hw == pytest.approx(ratio / low - 1, rel=1e-9)
    # an answer over configurations is the report's combined interval
    rows = [stats.ratio_interval_dof(a, b, (0.05, 12, 0.05, 12))] * 4
    est, lo, hi = stats.combined_ratio(rows)
    assert half_width(0.05, 12, [(3, 2)] * 4) == pytest.approx(hi / est - 1, rel=1e-9)


def test_only_open_answers_get_repeats_within_the_budget_and_cap():
    # PyG over DGL: GAT's points already have 6 repeats (its answer is narrow), GraphSAGE's 2
    # (models are never compared with each other, so its answer is the only one open)
    spread = (1.0, 1.1, 0.95, 1.05, 0.98, 1.02)
    pts = points(point("pyg", spread, model="gat"), point("dgl", [0.5 * x for x in spread], model="gat"),
                 point("pyg", [1.0, 1.1]), point("dgl", [0.5, 0.53]))
    plan = second_round.plan(pts, precision=0.08, budget_s=10_000, max_repeats=6)
    by = {p.label(): p for p in pts.values()}
    assert by["pyg gat d2 b256 w0"].added == 0 and by["dgl gat d2 b256 w0"].added == 0
    assert by["pyg sage d2 b256 w0"].added > 0 and by["dgl sage d2 b256 w0"].added > 0
    assert all(p.n <= 6 for p in pts.values())
    rows = {a["answer"]: a for a in plan.answers}
    assert rows["PyG over DGL, gat"]["status"] == "settled after round 1"
    assert rows["PyG over DGL, sage"]["status"] != "settled after round 1"
    assert "PyG over DGL, sage" in by["pyg sage d2 b256 w0"].why
    comps = {c["comparison"]: c for c in plan.comparisons}
    assert comps["PyG over DGL (gat d2 b256 w0)"]["status"] == "settled"
    # the budget: one run costs its wall time plus the job around it; an answer it cannot settle
    # is narrowed as far as it goes
    cost = 10.0 + plan_points.JOB_OVERHEAD_S
    tight = points(point("pyg", [1.0, 1.3]), point("dgl", [0.5, 0.6]))
    plan = second_round.plan(tight, precision=0.01, budget_s=2.5 * cost, max_repeats=50)
    assert sum(p.added for p in tight.values()) == 2 and plan.spent_s == pytest.approx(2 * cost)
    assert plan.answers[0]["status"].startswith("open") and plan.answers[0]["projected_half_width"] > 0.01
    tight = points(point("pyg", [1.0, 1.3]), point("dgl", [0.5, 0.6]))
    plan = second_round.plan(tight, precision=0.2, budget_s=100 * cost, max_repeats=50)
    assert plan.answers[0]["status"] == "settled by the repeats added"
    assert plan.spent_s == pytest.approx(sum(p.added for p in tight.values()) * cost)
    assert 0 < plan.spent_s < 100 * cost
    # what settling a comparison would take at the pooled spread, in runs and minutes: the fewest
    # runs (shared between the sides) that bring its interval within the precision
    plan = second_round.plan(points(point("pyg", [1.0, 1.1]), point("dgl", [0.5, 0.53])), precision=0.1, budget_s=0,
                         max_repeats=50)
    row = plan.comparisons[0]
    sd, dof = plan.pooled_sd, plan.pooled_dof
    k = row["to_settle_runs"]
    assert k > 0 and row["to_settle_min"] == pytest.approx(k * cost / 60, abs=0.06)
    assert row["status"] == f"open: {k} more runs (about {k * cost / 60:.1f} min) would settle it"
    assert half_width(sd, dof, [(2 + k - k // 2, 2 + k // 2)]) <= 0.1
    assert half_width(sd, dof, [(2 + (k - 1) - (k - 1) // 2, 2 + (k - 1) // 2)]) > 0.1


def test_where_the_interval_lies_plays_no_part():
    """Same spreads, a ratio of 1.0 in one sweep and 2.0 in the other: the same plan."""
    def added(ratio):
        pts = points(point("pyg", [1.0 * ratio, 1.1 * ratio, 0.95 * ratio]), point("dgl", [1.0, 1.04, 0.98]),
                     point("pyg", [2.0 * ratio, 2.02 * ratio, 1.97 * ratio], devices=1),
                     point("dgl", [2.0, 2.1, 2.05], devices=1))
        second_round.plan(pts, precision=0.06, budget_s=3000, max_repeats=30)
        return {p.label(): p.added for p in pts.values()}

    assert added(1.0) == added(2.0) and sum(added(1.0).values()) > 0


def test_the_pooled_spread_keeps_two_equal_times_from_looking_precise():
    pts = points(point("pyg", [1.0, 1.0]), point("dgl", [0.5, 0.5]),  # spread 0 by chance
                 point("pyg", [1.0, 1.2], devices=1), point("dgl", [1.0, 1.25], devices=1))
    plan = second_round.plan(pts, precision=0.15, budget_s=10_000, max_repeats=30)
    # PyG over DGL at d2 measured no spread, but the pooled spread says its answer is still open
    rows = {c["comparison"]: c for c in plan.comparisons}
    assert rows["PyG over DGL (sage d2 b256 w0)"]["measured_half_width"] > 0.15
    by = {p.label(): p.added for p in pts.values()}
    assert by["pyg sage d2 b256 w0"] > 0


def write_result(root, fw, rep, seconds):
    d = root / "runs" / "small" / f"{fw}-sage-d2-b256-w0-r{rep}"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "run_id": f"{fw}-{rep}", "status": "ok", "wall_time_s": 9.0,
        "config": {"framework": fw, "model": "sage", "devices": 2, "batch_size": 256, "workers": 0, "repeat": rep},
        "summary": {"steady_epoch_time_s": seconds}}))
    return str(d / "result.json")


def test_a_replan_keeps_the_repeats_an_earlier_plan_ran(tmp_path):
    first = [write_result(tmp_path, fw, rep, base * noise) for fw, base in (("pyg", 1.0), ("dgl", 0.5))
             for rep, noise in enumerate((1.0, 1.25))]
    write_result(tmp_path, "pyg", 2, 1.1)  # an earlier second round ran r2 of PyG
    out = tmp_path / "plan.json"
    second_round.main(["--precision", "0.01", "--budget-min", "1", "--max-repeats", "5", "--out", str(out), *first])
    plan = json.loads(out.read_text())
    pyg = sorted(r["repeat"] for r in plan["runs"] if r["name"].startswith("pyg"))
    dgl = sorted(r["repeat"] for r in plan["runs"] if r["name"].startswith("dgl"))
    assert pyg[0] == 2 and pyg == list(range(2, 2 + len(pyg)))  # r2 kept, new ones after it
    assert dgl == list(range(2, 2 + len(dgl)))
    by = {p["point"]: p for p in plan["points"]}
    assert by["pyg sage d2 b256 w0"]["kept"] == 1 and by["pyg sage d2 b256 w0"]["first_round"] == 2
    assert plan["comparisons"][0]["runs"] == "3+2"


def test_command_line_plans_from_result_files(tmp_path):
    """Real result.json files (the report's reader) in, the plan's runs out, numbered after the
    first round's repeats."""
    results = []
    for fw, base in (("pyg", 1.0), ("dgl", 0.5)):
        for rep, noise in enumerate((1.0, 1.25) if fw == "pyg" else (1.0, 1.2)):
            d = tmp_path / "runs" / "small" / f"{fw}-sage-d2-b256-w0-r{rep}"
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps({
                "schema_version": SCHEMA_VERSION, "run_id": f"{fw}-{rep}", "status": "ok", "wall_time_s": 9.0,
                "config": {"framework": fw, "model": "sage", "devices": 2, "batch_size": 256, "workers": 0,
                           "repeat": rep},
                "summary": {"steady_epoch_time_s": base * noise}}))
            results.append(str(d / "result.json"))
    out = tmp_path / "plan.json"
    assert second_round.main(["--precision", "0.25", "--budget-min", "1", "--max-repeats", "4", "--out", str(out),
                          *results]) == 0
    plan = json.loads(out.read_text())
    assert plan["first_round"] == 2 and plan["runs"]
    assert {r["name"] for r in plan["runs"]} <= {"pyg-sage-d2-b256-w0", "dgl-sage-d2-b256-w0"}
    assert min(r["repeat"] for r in plan["runs"]) == 2 and max(r["repeat"] for r in plan["runs"]) <= 3
    assert plan["planned_s"] <= 60
    with pytest.raises(SystemExit):
        second_round.main(["--precision", "5", "--budget-min", "1", "--max-repeats", "4", "--out", str(out)])

    # made again after a first-round run is redone: the plan it replaces is set aside first
    os.utime(out, (time.time() - 10, time.time() - 10))
    before = out.read_bytes()
    assert second_round.main(["--precision", "0.25", "--budget-min", "1", "--max-repeats", "4", "--out", str(out),
                              *results]) == 0
    (aside,) = (tmp_path / "previous").glob("plan-*.json")
    assert aside.read_bytes() == before and out.exists()


def test_a_plan_whose_first_round_is_gone_or_redone_is_set_aside(tmp_path):
    """A stale plan moves to previous/ (the sweep then makes it again); a plan newer than every
    result it was made from stays."""
    first = [tmp_path / f"run{i}" / "result.json" for i in range(2)]
    for f in first:
        f.parent.mkdir()
        f.write_text("{}")
    plan = tmp_path / "plan" / "repeats.json"
    plan.parent.mkdir()
    plan.write_text("{}")
    os.utime(plan, (time.time() + 5, time.time() + 5))
    assert plan_file.set_aside_stale_plan(plan, [str(f) for f in first]) is None and plan.exists()
    assert plan_file.set_aside_stale_plan(tmp_path / "none.json", [str(f) for f in first]) is None

    first[1].unlink()
    # the workflow's parse-time question only reads: the plan stays until the checkpoint runs
    made = plan.stat().st_mtime
    assert "1 of 2 results it was made from are gone" in plan_file.stale_plan(plan, [str(f) for f in first])
    assert plan.exists() and plan.stat().st_mtime == made and not (plan.parent / "previous").exists()
    said = plan_file.set_aside_stale_plan(plan, [str(f) for f in first])
    assert "1 of 2 results it was made from are gone" in said and str(first[1]) in said
    assert not plan.exists()
    (aside,) = (plan.parent / "previous").glob("repeats-*.json")
    assert str(aside) in said

    # made again, then a first-round run is redone after it
    plan.write_text("{}")
    first[1].write_text("{}")
    os.utime(first[0], (time.time() - 10, time.time() - 10))
    os.utime(plan, (time.time() - 5, time.time() - 5))
    said = plan_file.set_aside_stale_plan(plan, [str(f) for f in first])
    assert "1 of 2 results are newer" in said and not plan.exists()


def test_the_budget_goes_first_to_the_answers_it_can_settle():
    """Every point has the same spread; PyG over DGL rests on one configuration for GraphSAGE and
    on four for GAT, so GraphSAGE's answer is twice as wide. A budget that pays for GAT's answer
    but not for GraphSAGE's settles GAT's first (widest-first would have spent it all on GraphSAGE
    and settled neither)."""
    times = {"pyg": (1.0, 1.1, 0.95), "dgl": (0.525, 0.485, 0.5)}
    pts = dict(point(fw, t) for fw, t in times.items())
    pts.update(point(fw, t, model="gat", devices=d, batch=b) for fw, t in times.items() for d in (1, 2)
               for b in (256, 1024))
    cost = 10.0 + plan_points.JOB_OVERHEAD_S
    plan = second_round.plan(pts, precision=0.047, budget_s=10 * cost, max_repeats=40)
    rows = {a["answer"]: a for a in plan.answers}
    assert rows["PyG over DGL, sage"]["measured_half_width"] > 2 * 0.047
    assert 0.047 < rows["PyG over DGL, gat"]["measured_half_width"] < 0.06
    assert rows["PyG over DGL, gat"]["status"] == "settled by the repeats added"
    assert rows["PyG over DGL, sage"]["status"].startswith("open")
    assert plan.spent_s <= 10 * cost
    # what settling GAT's answer left is spent on GraphSAGE's, the widest still open
    sage = [p for p in pts.values() if p.key[1] == "sage"]
    assert sum(p.added for p in sage) == round((10 * cost - sum(p.added for p in pts.values() if p.key[1] == "gat")
                                                * cost) // cost)


def test_the_projection_uses_the_reports_noise_within_repeat_blocks():
    """A first round whose second repeat ran slower on every point: the report's block fit takes
    the shift out, and the plan projects with the same noise, not with the raw spread."""
    import pandas as pd

    from analysis.repeats.noise import pooled_noise

    slow = {("pyg", 256): (1.0, 1.31, 0.99), ("dgl", 256): (0.5, 0.64, 0.52),
            ("pyg", 1024): (0.3, 0.41, 0.31), ("dgl", 1024): (0.2, 0.25, 0.21)}
    pts, rows = {}, []
    for (fw, batch), times in slow.items():
        key, p = point(fw, times, batch=batch)
        p.repeats = [0, 1, 2]
        pts[key] = p
        rows += [{"experiment": "e", "framework": fw, "model": "sage", "devices": 2, "batch_size": batch,
                  "workers": 0, "repeat": r, "status": "ok", "t": t} for r, t in enumerate(times)]
    plan = second_round.plan(pts, precision=0.05, budget_s=0, max_repeats=5)
    report = pooled_noise(pd.DataFrame(rows), "t").describe().iloc[0]
    assert plan.pooled_sd == pytest.approx(report["sd_within_blocks"], rel=1e-9)
    assert plan.pooled_dof == report["dof_within_blocks"]
    assert plan.pooled_sd < second_round.pooled_spread(pts)[0] / 2


def test_a_comparison_across_loaders_is_the_loaders_tables_interval():
    """GraphBolt over DGL's classic loader: the plan projects with the noise of both loaders' timing
    runs fitted together, as the report's loaders table pools them (analysis.variants.pairing), so its
    half-width is that table's interval; a convergence run at a grid point is not in that pool."""
    import numpy as np
    import pandas as pd

    from analysis.variants.loaders import loader_rows

    noise = iter(np.exp(np.random.default_rng(4).normal(0, 0.1, size=24)))
    pts, rows = {}, []
    for loader, base in (("default", 1.0), ("graphbolt", 0.8)):
        for model in ("sage", "gat"):
            for d in (1, 2):
                key = ("dgl", model, d, 1024, 0, loader)
                times = [base / d * next(noise) for _ in range(3)]
                pts[key] = plan_points.Point(key, times, [10.0] * 3, {"dataset": "small", "name": f"{loader}-{model}-{d}"},
                                          repeats=[0, 1, 2])
                rows += [{"framework": "dgl", "model": model, "devices": d, "batch_size": 1024, "workers": 0,
                          "loader_variant": loader, "loader": "classic" if loader == "default" else loader,
                          "repeat": r, "status": "ok", "harness": "fair", "until": "precise", "epochs": 4,
                          "steady_epoch_time_s": t} for r, t in enumerate(times)]
    # a convergence run at a point of the grid, far off: the table leaves it out of the noise
    rows.append({**rows[0], "until": "epochs", "epochs": 40, "repeat": 0, "steady_epoch_time_s": 5.0})
    table = loader_rows(pd.DataFrame(rows)).set_index(["model", "devices", "loader_variant"])
    plan = second_round.plan(pts, precision=0.05, budget_s=0, max_repeats=5)
    for c in second_round.comparisons(pts):
        if c.axis == "graphbolt":
            row = table.loc[(c.den.key[1], c.den.key[2], "graphbolt")]
            assert plan.width(c, 3, 3) == pytest.approx(row["high"] / row["speedup_vs_default"] - 1, rel=1e-6)


def test_another_loaders_own_comparisons_get_no_repeats_of_their_own():
    """GraphBolt at 2 devices over 1 is not a first-screen answer (the first screen's speed-up is
    the frameworks' first loaders'), so it gets no repeats, however wide."""
    pts = {}
    for loader, times in (("default", (1.0, 1.02, 0.99)), ("graphbolt", (1.0, 1.5, 0.7))):
        for d in (1, 2):
            key = ("dgl", "sage", d, 1024, 0, loader)
            pts[key] = plan_points.Point(key, [t / d for t in times], [10.0] * 3,
                                      {"dataset": "small", "name": f"{loader}-dgl-sage-d{d}-b1024-w0"})
    plan = second_round.plan(pts, precision=0.05, budget_s=10_000, max_repeats=8)
    rows = {a["answer"]: a for a in plan.answers}
    assert rows["2 devices over 1, dgl graphbolt"]["status"] == "open: not a first-screen answer, so no repeats of its own"
    assert "2 devices over 1, dgl graphbolt" not in {w for p in pts.values() for w in p.why}
    assert rows["2 devices over 1, dgl"]["measured_half_width"] < rows["2 devices over 1, dgl graphbolt"]["measured_half_width"]
    # the report's sentence counts the first-screen answers only
    from analysis.report.sweep_record import adaptive_findings

    text = adaptive_findings(plan.to_json(pts, 3))[0]
    first_screen = [a for a in plan.answers if "not a first-screen" not in a["status"]]
    assert f"of {len(first_screen)} answers were wider" in text and len(first_screen) < len(plan.answers)


def test_a_second_round_repeat_is_a_whole_block_the_reports_fit_can_use():
    """The report fits log epoch time as configuration + block (repeat x model): a run alone in
    its block tells it nothing. So a repeat buys one more run at every point of the answer, all
    with the same repeat number, and with those runs the fit's standard error of each comparison
    is what the plan projected (sd x sqrt(1/n_a + 1/n_b)). (Per point, the planner put the runs
    where one run narrowed the projection most: at one point, alone in a new block.)"""
    import numpy as np

    from analysis.repeats.noise import fit_blocks

    pts = {}
    noise = iter(np.exp(np.random.default_rng(1).normal(0, 0.1, size=24)))
    for model in ("sage", "gat"):
        for d in (1, 2):
            for w in (0, 1):
                key, p = point("pyg", [1.0 / d * (1.2 if w else 1.0) * next(noise) for _ in range(3)],
                               model=model, devices=d, batch=1024, workers=w)
                p.repeats = [0, 1, 2]
                pts[key] = p
    cost = 10.0 + plan_points.JOB_OVERHEAD_S
    plan = second_round.plan(pts, precision=0.02, budget_s=9 * cost, max_repeats=10)
    assert [p.added for p in pts.values()] == [1] * 8 and plan.spent_s == pytest.approx(8 * cost)
    doc = plan.to_json(pts, 3)
    assert {r["repeat"] for r in doc["runs"]} == {3} and len(doc["runs"]) == 8
    # the design the report will fit once the block has run: every comparison's error is the projection's
    rng = np.random.default_rng(0)
    cells = {k: ([float(v) for v in rng.normal(size=4)], [(str(r), k[1]) for r in (0, 1, 2, 3)]) for k in pts}
    fit = fit_blocks(cells)
    for c in second_round.comparisons(pts):
        _, se, _ = fit.contrast(c.num.key, c.den.key)
        assert se / fit.sd == pytest.approx(math.sqrt(1 / c.num.n + 1 / c.den.n), rel=1e-9)
    # the projected degrees of freedom grow as the fit's: two blocks (one per model) of 4 runs
    first = fit_blocks({k: (v[:3], b[:3]) for k, (v, b) in cells.items()})
    assert plan.dof_growth("default") == fit.dof - first.dof == 6


def test_blocks_stay_whole_where_the_first_rounds_differ():
    """PyG's trimmed runs have 2 first-round repeats beside 3 of the untrimmed and DGL runs. The
    round's runs still share their blocks: each trimmed run lands beside its untrimmed and DGL
    partners (one repeat number a block, the round's next), and the projection is the block fit of
    the runs as the plan file numbers them. (A plan that put the trimmed runs in block 2 and ran
    them as repeat 3, alone, projected ±9.9 % and gave ±10.6 %.) The trim answers take the noise
    of the untrimmed and trimmed runs fitted together, as the report's trim table pools it."""
    import numpy as np

    from analysis.repeats.noise import fit_blocks

    rng = np.random.default_rng(3)
    pts = {}
    for model in ("sage", "gat"):
        for d in (1, 2):
            for fw, variant, base, reps in (("pyg", "default", 1.0, 3), ("pyg", "trim", 0.6, 2),
                                            ("dgl", "default", 0.35, 3), ("dgl", "graphbolt", 0.4, 3)):
                key = (fw, model, d, 1024, 0, variant)
                times = [base / d * float(np.exp(rng.normal(0, 0.09))) for _ in range(reps)]
                pts[key] = plan_points.Point(key, times, [10.0] * reps, {"dataset": "small", "name": "-".join(map(str, key))},
                                              repeats=list(range(reps)))
    plan = second_round.plan(pts, precision=0.1, budget_s=10_000, max_repeats=8, first_round=3)
    rows = {a["answer"]: a for a in plan.answers}
    trim_rows = [r for name, r in rows.items() if "trim" in name and r["first_screen"]]
    assert trim_rows and all(r["measured_half_width"] > 0.1 >= r["projected_half_width"] for r in trim_rows)
    doc = plan.to_json(pts, 3)
    planned: dict = {}
    for run in doc["runs"]:
        key = next(k for k, p in pts.items() if p.run["name"] == run["name"])
        planned.setdefault(key, []).append(run["repeat"])
    for key, reps in planned.items():
        if key[-1] == "trim":
            for r in reps:  # each trimmed run's block holds an untrimmed or DGL run too
                assert any(r in planned.get(k, []) for k in pts if k[1] == key[1] and k[-1] == "default")
    # the design the report fits once the round has run: every trim comparison's error is the projection's
    pool = second_round.across("trim")
    cells = {k: ([float(v) for v in rng.normal(size=len(p.times) + len(planned.get(k, [])))],
                 [(str(r), k[1]) for r in p.repeats + planned.get(k, [])])
             for k, p in pts.items() if k[-1] in ("default", "trim")}
    fit = fit_blocks(cells)
    trims = [c for c in second_round.comparisons(pts) if {c.num.key[-1], c.den.key[-1]} == {"trim", "default"}]
    assert trims and {second_round.pool_of(c) for c in trims} == {pool}
    for c in trims:
        _, se, dof = fit.contrast(c.num.key, c.den.key)
        factor, planned_dof = plan.contrast_factor(pool, c.num.key, c.den.key)
        assert (se / fit.sd) ** 2 == pytest.approx(factor, rel=1e-9) and dof == planned_dof
    # the pool is the two loaders' runs, without GraphBolt's
    first = {k: ([math.log(t) for t in p.times], p.blocks()) for k, p in pts.items() if k[-1] in ("default", "trim")}
    assert second_round.launch_noise(pts)[0][pool] == pytest.approx((fit_blocks(first).sd, fit_blocks(first).dof))


def test_the_plan_aims_inside_the_precision():
    """An answer just inside the precision after the first round still gets a block: the report
    judges it on the noise fitted after the round, which the round's runs move."""
    spread = [1.0, 1.1, 0.93]
    pts = points(point("pyg", spread), point("dgl", [0.5 * x for x in reversed(spread)]))
    width = second_round.plan(dict(pts), precision=0.5, budget_s=0, max_repeats=10).answers[0]["measured_half_width"]
    precision = width / (1 - second_round.AIM_MARGIN / 2)  # between the aim and the precision
    fresh = points(point("pyg", spread), point("dgl", [0.5 * x for x in reversed(spread)]))
    plan = second_round.plan(fresh, precision=precision, budget_s=10_000, max_repeats=10)
    row = plan.answers[0]
    assert row["measured_half_width"] <= precision and row["added"] > 0
    assert row["projected_half_width"] <= precision * (1 - second_round.AIM_MARGIN)
    # the report's account of the round says what it aimed at
    from analysis.report.sweep_record import adaptive_findings

    aim = 100 * precision * (1 - second_round.AIM_MARGIN)
    assert f"Each answer is aimed at ±{aim:.3g}%, inside the ±{100 * precision:g}%" in adaptive_findings(
        plan.to_json(fresh, 3))[0]


def test_what_settling_costs_is_the_planners_projection_from_all_runs():
    """The report's "would settle them" is the planner's: whole blocks, with no budget, from every
    run so far; the runs it names settle the answer and a block fewer would not."""
    import pandas as pd

    import numpy as np

    noise = iter(np.exp(np.random.default_rng(2).normal(0, 0.1, size=12)))
    rows = []
    for fw, base in (("pyg", 1.0), ("dgl", 0.5)):
        for d in (1, 2):
            for r in range(3):
                rows.append({"framework": fw, "model": "sage", "devices": d, "batch_size": 256, "workers": 0,
                             "loader_variant": "default", "repeat": r, "status": "ok", "until": "precise",
                             "steady_epoch_time_s": base / d * next(noise), "wall_time_s": 10.0})
    runs = pd.DataFrame(rows)
    cost = second_round.settling_cost(plan_points.points_from_runs(runs), 0.08, [("framework:pyg", "sage")])
    assert cost["settled"] and cost["answers"] == [("framework:pyg", "sage")]
    assert cost["runs"] > 0 and cost["runs"] % 4 == 0  # blocks of the answer's 4 points
    assert cost["seconds"] == pytest.approx(cost["runs"] * (10.0 + plan_points.JOB_OVERHEAD_S))
    pts = plan_points.points_from_runs(runs)
    plan, _, answers, _ = second_round._answers(pts, 0.08, 0, 40)
    cs = answers["PyG over DGL, sage"]
    for p in pts.values():
        p.added = cost["runs"] // 4
    assert plan.answer_width(cs) <= 0.08
    for p in pts.values():
        p.added -= 1
    assert plan.answer_width(cs) > 0.08
    # an answer that is already within the precision costs nothing
    assert second_round.settling_cost(plan_points.points_from_runs(runs), 0.5, [("framework:pyg", "sage")])["runs"] == 0


def test_the_projection_counts_a_run_as_the_block_fit_will():
    """A planned run narrows a comparison only as far as the report's block fit lets it: DGL's two
    points in a new block without PyG tell PyG over DGL little (less than one run more a side
    would), and with PyG's point in that block too, the comparison is a balanced one of 4 + 4."""
    import numpy as np

    noise = iter(np.exp(np.random.default_rng(5).normal(0, 0.1, size=9)))
    pts = {}
    for fw, d in (("pyg", 2), ("dgl", 2), ("dgl", 1)):
        key, p = point(fw, [(2.0 if fw == "pyg" else 1.0) / d * next(noise) for _ in range(3)], devices=d)
        p.repeats = [0, 1, 2]
        pts[key] = p
    plan = second_round.plan(pts, precision=0.5, budget_s=0, max_repeats=10)
    pyg, dgl2, dgl1 = pts.values()
    (c,) = [c for c in second_round.comparisons(pts) if c.ratio.column == "framework"]
    before = plan.projected_part(c)[0]
    dgl2.added = dgl1.added = 1
    aside = plan.projected_part(c)[0]
    per_run = plan.part(c, pyg.n, dgl2.n)[0]
    assert per_run < aside <= before
    pyg.added = 1
    sd = plan.noise["default"][0]
    assert plan.projected_part(c)[0] == pytest.approx(sd * sd * (1 / 4 + 1 / 4), rel=1e-9)
