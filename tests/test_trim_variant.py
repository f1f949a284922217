"""PyG with trim_to_layer as a variant (config `trim`, analysis/variants/trim.py): on constructed
runs whose times are known, trimmed PyG is paired with untrimmed PyG and with DGL at the same
points, the first screen says how much of the gap trimming closes, the second round plans repeats
for it, and runs without trimming read as before."""

import pandas as pd
import pytest

from analysis import grouping
from analysis.repeats import plan_points, second_round
from analysis.report import sections
from analysis.variants.loaders import loader_rows
from analysis.variants.trim import trim_parts, trim_rows, trim_table, with_trim
from runners.adapters import registry

# Epoch time per framework variant at 1 device; 2 devices take 0.6 of it. Trimming halves PyG's
# epoch, which leaves it 1.5x DGL's (3x untrimmed).
BASE = {("pyg", False): 3.0, ("pyg", True): 1.5, ("dgl", False): 1.0}
# Edge updates per step: trimmed PyG computes what DGL's blocks do, untrimmed twice that.
EDGES = {("pyg", False): 2000.0, ("pyg", True): 1200.0, ("dgl", False): 1000.0}
NOISE = (1.03, 0.97, 1.01)  # launch noise per repeat, the same for every cell


def runs_frame(trim: bool = True, graphbolt: bool = False, work: bool = True) -> pd.DataFrame:
    rows = []
    cells = [k for k in BASE if trim or not k[1]] + ([("dgl", "graphbolt")] if graphbolt else [])
    for (fw, variant), d, r in ((c, d, r) for c in cells for d in (1, 2) for r in range(3)):
        trims, loader = variant is True, variant if isinstance(variant, str) else "default"
        t = BASE.get((fw, trims), 0.8) * (0.6 if d == 2 else 1.0) * NOISE[r]
        rows.append({"run_id": f"{fw}-{variant}-d{d}-r{r}", "status": "ok", "framework": fw, "model": "sage",
                     "devices": d, "batch_size": 1024, "workers": 0, "repeat": r, "dataset": "small",
                     "device_type": "cpu", "epochs": 4, "until": "precise", "precision": 0.05, "harness": "fair",
                     "inject": None,
                     "pyg_trim": trims, "loader_variant": loader, "steady_epoch_time_s": t, "wall_time_s": 9.0}
                    | ({"step_layer_edges": EDGES.get((fw, trims), 900.0)} if work else {}))
    return grouping.add_experiment(pd.DataFrame(rows))


def test_trimmed_runs_pair_with_the_untrimmed_and_the_other_framework_at_their_points():
    rows = trim_rows(runs_frame()).set_index(["devices", "framework", "trim_variant"])
    assert len(rows) == 6  # per point: PyG untrimmed, PyG trimmed, DGL
    for d in (1, 2):
        trimmed = rows.loc[(d, "pyg", registry.LAYER_TRIM)]
        # the same noise per repeat on both sides: the ratios are exact, their intervals narrow
        assert trimmed["speedup_vs_default"] == pytest.approx(2.0)
        assert trimmed["low"] < 2.0 < trimmed["high"] and trimmed["verdict"] == "faster"
        assert trimmed["over_other_on_default"] == pytest.approx(1.5) and trimmed["other_framework"] == "dgl"
        assert trimmed["gap_low"] < 1.5 < trimmed["gap_high"] and trimmed["gap_dof"] > 0
        assert rows.loc[(d, "pyg", "default")]["over_other_on_default"] == pytest.approx(3.0)
        # DGL's gap is taken against untrimmed PyG, as the speed table takes it
        assert rows.loc[(d, "dgl", "default")]["over_other_on_default"] == pytest.approx(1 / 3)


def test_the_first_screen_says_how_much_of_the_gap_trimming_closes():
    intervals = []
    # the page's first screen reads the trim table's rows (first_screen.Frames.trim): the same rows
    rows = trim_table(runs_frame()).data
    pd.testing.assert_frame_equal(rows, trim_rows(runs_frame()))
    text = "".join(t for t, _ in trim_parts(rows, intervals))
    assert text.startswith("With trim_to_layer (2 configurations a model): GraphSAGE: PyG takes 1.50× as long as DGL")
    assert "at 1.20× its edge updates per step, against 3.00× untrimmed" in text
    assert "trimming cuts PyG's epoch by 50 % (95% CI" in text
    # the trimmed-over-untrimmed and trimmed-over-DGL intervals are answers the second round plans repeats for
    i, gap = intervals
    assert i["answer"] == (registry.LAYER_TRIM, "sage") and i["estimate"] == pytest.approx(0.5)
    assert i["low"] < 0.5 < i["high"] and i["points"] == 4
    assert gap["answer"] == (sections.trim_axis("pyg"), "sage") and gap["estimate"] == pytest.approx(1.5)
    assert gap["low"] < 1.5 < gap["high"] and gap["what"] == "GraphSAGE PyG trimmed / DGL"
    # results from before the work columns: the same sentence without the work
    older = "".join(t for t, _ in trim_parts(trim_rows(runs_frame(work=False))))
    assert older == text.replace(" at 1.20× its edge updates per step", "")


def test_without_trimmed_runs_nothing_is_said_and_other_variants_read_as_before():
    assert trim_parts(trim_rows(runs_frame(trim=False))) == []
    assert trim_rows(runs_frame(trim=False)).empty
    # trimmed PyG runs at GraphBolt's points are no untrimmed PyG runs for the loaders' table
    both, plain = (loader_rows(runs_frame(trim=t, graphbolt=True)) for t in (True, False))
    pd.testing.assert_frame_equal(both, plain)
    # and a GraphBolt run is no untrimmed DGL run for the trim table
    assert set(with_trim(runs_frame(graphbolt=True))["loader_variant"]) == {"default"}
    assert len(trim_rows(runs_frame(graphbolt=True))) == 6


def test_the_second_round_plans_repeats_for_the_trimming_answer():
    assert sections.ratios()[registry.LAYER_TRIM].numerator == registry.LAYER_TRIM
    runs = runs_frame()
    # launch noise of its own per run, so that the answers have a width to settle
    runs["steady_epoch_time_s"] *= [1 + 0.04 * ((i * 7) % 5 - 2) for i in range(len(runs))]
    points = plan_points.points_from_runs(runs)
    assert ("pyg", "sage", 1, 1024, 0, registry.LAYER_TRIM) in points
    assert plan_points.loader_variant({"framework": "pyg", "pyg_trim": True, "loader": "neighbor"}) == "trim"
    assert plan_points.loader_variant({"framework": "dgl", "pyg_trim": True}) == "default"
    trims = [c for c in second_round.comparisons(points) if c.axis == registry.LAYER_TRIM]
    assert len(trims) == 2 and all(c.on_first_screen() and c.answer_key() == ("trim", "sage") for c in trims)
    assert {c.den.key[-1] for c in trims} == {"default"} and {c.num.key[0] for c in trims} == {"pyg"}
    cost = second_round.settling_cost(points, 0.001, [("trim", "sage")], max_repeats=4)
    assert cost["answers"] == [("trim", "sage")] and cost["runs"] > 0


def test_the_second_round_plans_repeats_for_the_gap_left_after_trimming():
    """Trimmed PyG over DGL differs in two keys (framework and variant): it is still one answer the
    planner projects and buys blocks for, paired at the points both ran."""
    ratio = sections.ratios()[sections.trim_axis("pyg")]
    assert (ratio.column, ratio.numerator, ratio.denominator, ratio.numerator_variant) == (
        "framework", "pyg", "dgl", registry.LAYER_TRIM)
    runs = runs_frame(graphbolt=True)
    runs["steady_epoch_time_s"] *= [1 + 0.04 * ((i * 7) % 5 - 2) for i in range(len(runs))]
    points = plan_points.points_from_runs(runs)
    gaps = [c for c in second_round.comparisons(points) if c.axis == sections.trim_axis("pyg")]
    # trimmed PyG against DGL's first loader only, never against GraphBolt
    assert sorted((c.num.key, c.den.key) for c in gaps) == [
        (("pyg", "sage", d, 1024, 0, registry.LAYER_TRIM), ("dgl", "sage", d, 1024, 0, "default")) for d in (1, 2)]
    assert all(c.on_first_screen() and c.answer_key() == ("trim:pyg", "sage") for c in gaps)
    # the plain framework ratio still pairs untrimmed PyG with DGL
    plain = {c.num.key[-1] for c in second_round.comparisons(points) if c.axis == "framework:pyg"}
    assert plain == {"default"}
    cost = second_round.settling_cost(points, 0.001, [("trim:pyg", "sage")], max_repeats=4)
    assert cost["answers"] == [("trim:pyg", "sage")] and cost["runs"] > 0
    plan = second_round.plan(points, 0.02, 600, 6)
    assert any(a["answer"].startswith("PyG with trim_to_layer over DGL") for a in plan.answers)


def test_the_second_rounds_width_is_the_reports_where_the_report_splits_its_pool():
    """GAT's runs spread far more than GraphSAGE's, so the trim table's pool is split by model
    (Bartlett's test, analysis.repeats.noise.split). The planner follows the split: its half-width
    of each trimming answer is the first screen's own, to the digit, not one pooled over both
    models (which put GAT's answer at ±9 % where the page said ±11 %)."""
    import math

    import numpy as np

    rng = np.random.default_rng(7)
    frames = []
    for model, sd in (("sage", 0.02), ("gat", 0.2)):
        f = runs_frame().assign(model=model)
        f["run_id"] = f["run_id"] + f"-{model}"
        f["steady_epoch_time_s"] *= np.exp(rng.normal(0, sd, len(f)))
        frames.append(f)
    runs = pd.concat(frames, ignore_index=True)
    intervals = []
    trim_parts(trim_rows(runs), intervals)
    page = {(i["answer"][0], i["answer"][1]): math.sqrt(i["high"] / i["low"]) - 1 for i in intervals}
    points = plan_points.points_from_runs(runs)
    plan = second_round.plan(points, precision=0.5, budget_s=0, max_repeats=8)
    assert any("(model gat)" in g for g in plan.noise)  # the pool was split
    # and the report's account of the round names the parts it projected with
    from analysis.report.sweep_record import adaptive_findings

    assert "(launch noise SD 0.0" in adaptive_findings(plan.to_json(points, 3))[0]
    assert "(model gat, " in adaptive_findings(plan.to_json(points, 3))[0]
    widths = {(c["answer"]): c["measured_half_width"] for c in plan.answers}
    for model, label in (("sage", "sage"), ("gat", "gat")):
        assert widths[f"trimmed layers over untrimmed, {label}"] == pytest.approx(page[(registry.LAYER_TRIM, model)], abs=1e-4)
        assert widths[f"PyG with trim_to_layer over DGL, {label}"] == pytest.approx(
            page[(sections.trim_axis("pyg"), model)], abs=1e-4)
    assert widths["trimmed layers over untrimmed, gat"] > 3 * widths["trimmed layers over untrimmed, sage"]
